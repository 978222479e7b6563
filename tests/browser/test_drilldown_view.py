"""The drill-down (``views/drilldown.ts``) in a real browser: opened from a table cell and from a
bar of the chart (which scrolls it into view), its tree of call paths (expanded, collapsed, by
mouse and keyboard, against the engine's tree), its trace file and its link to the PyTorch
Profiler tab (or the trace's download without it), and kernel names shortened by
``format.shortKernelName`` with the full name on hover, on a real H100 trace and on every kernel
name of the shared GPU traces. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SHARED_TRACES
from pages import cell, drill_title, engine_drilldown, expect_ink, fmt_us, open_run, open_tab, shot
from playwright.sync_api import Frame, Locator, Page, expect

from devtools.tbserver import TensorBoard
from tb_attn_plugin.engine.loader import load_events, resolve_runs
from tb_attn_plugin.trace.kineto import DEVICE_KINDS

H100 = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"
FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, " \
        "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, " \
        "false, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)"


def _row(drill: Locator, node_id: int) -> Locator:
    return drill.locator(f'tr[data-node="{node_id}"]')


def test_drilldown_from_a_table_cell(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    cell(frame, 0, "softmax", "CPU time").click()
    expect(drill_title(frame)).to_have_text("Drill-down: Layer 0 \u00b7 softmax \u00b7 forward")
    drill = frame.locator("section.drill")
    expect(drill.locator("td.name", has_text="aten::softmax").first).to_be_visible()
    expect(cell(frame, 0, "softmax", "CPU time")).to_have_class(re.compile(r"\bsel\b"))
    (run,) = [r for r in resolve_runs(str(browser_logdir)) if r.name == "demo/naive"]
    expect(drill.locator("code")).to_have_text(run.files[0].name)
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        link = drill.get_by_role("link", name="Open the PyTorch Profiler tab")
        expect(link).to_have_attribute("href", "../../../#pytorch_profiler")
        # One trace file: that tab hides its Spans list, so there is no span to pick.
        expect(drill.locator(".trace-link")).to_contain_text(
            f"pick run demo/naive, worker {run.files[0].worker}, then its Trace view")
        expect(drill.locator(".trace-link")).to_contain_text("loads its charts from a CDN")
    else:
        link = drill.get_by_role("link", name="Download the trace file")
        expect(link).to_have_attribute("href", re.compile(r"^\./trace\?run=demo%2Fnaive&file="))
    shot(page, artifacts, "drilldown")
    drill.get_by_role("button", name="Close drill-down").click()
    expect(drill).to_be_hidden()
    expect(cell(frame, 0, "softmax", "CPU time")).not_to_have_class(re.compile(r"\bsel\b"))
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        # The link switches TensorBoard itself (the top page) to the profiler's tab.
        cell(frame, 0, "softmax", "CPU time").click()
        drill.get_by_role("link", name="Open the PyTorch Profiler tab").click()
        page.wait_for_url(re.compile(r"#pytorch_profiler$"))


def test_the_tree_expands_and_collapses(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path) -> None:
    """The q·kᵀ phase of the naive run: aten::matmul calls reshape (which clones q and kᵀ) and
    bmm; the tab shows the engine's tree, roots open, and each toggle shows or hides a subtree."""
    d = engine_drilldown(browser_logdir, "demo/naive", layer=0, phase="qk_matmul")
    root = d.tree[0]
    assert root.name == "aten::matmul" and root.parent is None
    kids = [d.tree[c] for c in root.children]
    inner = next(k for k in kids if k.children)  # a child with children of its own
    grandkids = [d.tree[c] for c in inner.children]
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    cell(frame, 0, "qk_matmul", "CPU time").click()
    drill = frame.locator("section.drill")
    expect(drill_title(frame)).to_have_text("Drill-down: Layer 0 \u00b7 Q\u00b7K\u1d40 \u00b7 forward")
    toggle = _row(drill, root.id).get_by_role("button", name="aten::matmul")
    # Roots start open: their children show, the grandchildren wait.
    expect(toggle).to_have_attribute("aria-expanded", "true")
    for kid in kids:
        expect(_row(drill, kid.id)).to_be_visible()
        expect(_row(drill, kid.id).locator(".op-name")).to_have_text(kid.name)
        expect(_row(drill, kid.id)).to_have_attribute("data-depth", "1")
    for g in grandkids:
        expect(_row(drill, g.id)).to_be_hidden()
    # The root's figures are the engine's: calls, CPU time and self time per step.
    cells = _row(drill, root.id).locator("td")
    expect(cells.nth(2)).to_have_text("1")
    expect(cells.nth(3)).to_have_text(fmt_us(root.cpu_us))
    expect(cells.nth(4)).to_have_text(fmt_us(root.self_us))
    expect(cells.nth(1)).to_have_text(", ".join(f"[{', '.join(map(str, dims))}] float" for dims in root.input_dims))
    # Open the child: its own children show, one level deeper.
    _row(drill, inner.id).get_by_role("button", name=inner.name).click()
    expect(_row(drill, inner.id).get_by_role("button", name=inner.name)).to_have_attribute("aria-expanded", "true")
    for g in grandkids:
        expect(_row(drill, g.id)).to_be_visible()
        expect(_row(drill, g.id)).to_have_attribute("data-depth", "2")
    shot(page, artifacts, "drilldown-tree")
    # Close the root: the whole subtree hides.
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    for n in (*kids, *grandkids):
        expect(_row(drill, n.id)).to_be_hidden()
    # From the keyboard: Enter on the focused toggle opens it again, with the child still open.
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    for n in (*kids, *grandkids):
        expect(_row(drill, n.id)).to_be_visible()
    drill.get_by_role("button", name="Collapse all").click()
    expect(drill.locator("tbody tr:visible")).to_have_count(sum(n.parent is None for n in d.tree))
    drill.get_by_role("button", name="Expand all").click()
    expect(drill.locator("tbody tr:visible")).to_have_count(len(d.tree))


def test_a_bar_click_brings_the_drilldown_into_view(tensorboard: Any, page: Page, artifacts: Path) -> None:
    height = 700
    page.set_viewport_size({"width": 1400, "height": height})
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    expect_ink(frame, "section.layers .chart canvas", [2000], "the bar chart")
    drill = frame.locator("section.drill")
    expect(drill).to_be_hidden()
    chart = frame.locator("section.layers .chart")
    box = chart.bounding_box()
    assert box is not None
    # Layer 0's bar is the left one (the chart's grid: 70 px left, 16 right, 28 below), from the axis up.
    chart.click(position={"x": 70 + (box["width"] - 86) / 4, "y": box["height"] - 28 - 4})
    expect(drill_title(frame)).to_contain_text("Drill-down: Layer 0 \u00b7 ")
    expect(drill.locator("table.drill-tree")).to_be_visible()
    # It opened below the fold (past the chart and the table), and was scrolled into view.
    assert _top_in_document(frame, "section.drill") > height
    expect(drill.locator("h3")).to_be_in_viewport()
    expect(drill.locator("table.drill-tree")).to_be_in_viewport()
    page.screenshot(path=str(artifacts / "drilldown-in-view.png"))


def _top_in_document(frame: Frame, selector: str) -> float:
    """Where the element starts in its document, however far that has scrolled."""
    return float(frame.eval_on_selector(selector, "e => e.getBoundingClientRect().top + window.scrollY"))


# -- kernel names ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    """A TensorBoard over one run: the H100 trace (BERT-small, SDPA's flash backend)."""
    logdir = tmp_path_factory.mktemp("gpu-logdir")
    (logdir / "h100").mkdir()
    shutil.copy(H100, logdir / "h100" / "gpu.1.pt.trace.json.gz")
    with TensorBoard(logdir, only=["tb_attn"]) as tb:
        yield tb


def test_kernel_names_are_short_with_the_full_name_on_hover(gpu_tensorboard: TensorBoard, page: Page,
                                                            artifacts: Path) -> None:
    frame = open_tab(page, gpu_tensorboard.url)
    open_run(frame, "h100")
    # The backend's evidence in the overview, and the kernels a finding lists.
    backend = frame.locator(".card .stat .kernel-name", has_text=re.compile("^flash_fwd_kernel$"))
    expect(backend).to_have_attribute("title", FLASH)
    # (dispatch-bound and far-from-roof both list it: the first is enough)
    gemm = frame.locator("[data-testid=findings] .kernel-name",
                         has_text=re.compile("^cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8$")
                         ).first
    expect(gemm).to_have_attribute("title",
                                   re.compile(r"^void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm"))
    # In the drill-down: the kernel hangs under the op that launched it, three levels down.
    d = engine_drilldown(Path(gpu_tensorboard.logdir), "h100", layer=0, phase="sdpa")
    (kernel,) = [n for n in d.tree if n.kind == "kernel"]
    assert kernel.parent is not None
    launcher = d.tree[kernel.parent]
    assert (kernel.name, launcher.name, kernel.depth) == (FLASH, "aten::_flash_attention_forward", 3)
    cell(frame, 0, "sdpa", "device time").click()  # a GPU trace: the table shows device time first
    drill = frame.locator("section.drill")
    expect(_row(drill, kernel.id)).to_be_hidden()  # below an op that starts closed
    drill.get_by_role("button", name="Expand all").click()
    label = _row(drill, kernel.id).locator(".kernel-name")
    expect(label).to_have_text("flash_fwd_kernel")
    expect(label).to_have_attribute("title", FLASH)
    expect(_row(drill, kernel.id).locator("td").nth(5)).to_have_text(fmt_us(kernel.device_us))
    expect(drill.locator(".drill-kernels .kernel-name", has_text=re.compile("^flash_fwd_kernel$"))).to_have_attribute(
        "title", FLASH)
    shot(page, artifacts, "drilldown-gpu")


# Real kernel names by a prefix of the full name, and what a person should read.
EXPECTED = [
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),  # plain names stay
    ("attn_fwd", "attn_fwd"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 7,", "softmax_warp_forward"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16",
     "vectorized_layer_norm_kernel"),
    ("void pytorch_flash::flash_fwd_kernel<", "flash_fwd_kernel"),
    ("cask_cudnn::computeOffsetsKernel(", "computeOffsetsKernel"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<", "winogradForwardData4x4"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>",
     "cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >", "vectorized_elementwise_kernel<MulFunctor>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>",
     "vectorized_elementwise_kernel<FillFunctor>"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "float, float, float, at::native::binary_internal::DivFunctor<float> > >", "elementwise_kernel<DivFunctor>"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
     "namespace)::masked_fill_kernel(", "elementwise_kernel<masked_fill_kernel>"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()", "reduce_kernel<sum_functor>"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
     "at::native::or_kernel_cuda(", "reduce_kernel<or_kernel_cuda>"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(",
     "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<", "gemvx::kernel"),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x144x64_MI16x16x1_SN",
     "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x144x64_MI16x16x1_SN\u2026"),  # cut to 72
]
SHORTEN = "async names => { const m = await import('./index.js'); return names.map(n => m.shortKernelName(n)); }"


def _kernel_names() -> list[str]:
    names: set[str] = set()
    for path in sorted(SHARED_TRACES.glob("*/*.json.gz")):
        ev = load_events(str(path))
        device = np.unique(ev.name[np.isin(ev.kind, DEVICE_KINDS)])
        names.update(ev.names[int(i)] for i in device.tolist())
    return sorted(names)


def test_the_short_kernel_name_rule_on_real_kernel_names(tensorboard: Any, page: Page) -> None:
    """``format.shortKernelName`` itself, in the page: the tab's module exports it."""
    names = _kernel_names()
    assert len(names) > 300
    frame = open_tab(page, tensorboard.url)
    short = dict(zip(names, frame.evaluate(SHORTEN, names), strict=True))
    for prefix, expected in EXPECTED:
        matched = [n for n in names if n.startswith(prefix)]
        assert matched, f"no kernel name starts with {prefix!r}"
        assert {short[n] for n in matched} == {expected}, prefix
    again = dict(zip(short.values(), frame.evaluate(SHORTEN, list(short.values())), strict=True))
    for name, s in short.items():
        assert s and len(s) <= 72, (name, s)
        assert again[s] == s, (name, s)  # a short name is its own short name
        # Nothing invented: every word of the short name is in the full one.
        assert all(w in name for w in re.findall(r"[A-Za-z_][\w]*", s)), (name, s)
    assert frame.evaluate(SHORTEN, ["aten::softmax", "autograd::engine::evaluate_function: SoftmaxBackward0"]) == [
        "aten::softmax", "autograd::engine::evaluate_function: SoftmaxBackward0"]  # op names stay as they are
