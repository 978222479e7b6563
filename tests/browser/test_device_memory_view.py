"""The run overview names an AMD GPU as one, and memory a trace did not record reads "—", not
"0 B" (issue 36, item 6), in a real browser over real traces. Screenshots go to
``test-artifacts/``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SHARED_TRACES
from pages import back_to_runs, engine_summary, fmt_bytes, open_run, open_tab, shot, stat, traces_tensorboard
from playwright.sync_api import Page, expect

from devtools.tbserver import TensorBoard

NOT_RECORDED = "memory not recorded (profile_memory=False)"
#: run name -> trace: ROCm with memory events, CUDA with memory events, ROCm without any.
TRACES = {
    "mi300x": SHARED_TRACES / "gpu" / "tracelens_mi300x_bert-small_sdpa-flash.json.gz",
    "h100": SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz",
    "sd35": SHARED_TRACES.parent / "production-traces" / "tracelens_xdit_sd3.5_mi300_diffusion.json.gz",
}


@pytest.fixture(scope="module")
def device_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    with traces_tensorboard(tmp_path_factory, TRACES) as tb:
        yield tb


def test_the_device_stat_names_the_gpu(device_tensorboard: TensorBoard, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, device_tensorboard.url)
    for run, gpu in (("mi300x", "ROCm · AMD Instinct MI300X VF"), ("h100", "CUDA · NVIDIA H100 80GB HBM3")):
        ws = engine_summary(Path(device_tensorboard.logdir), run)
        assert ws.gpu == gpu and ws.memory_recorded
        open_run(frame, run)
        expect(stat(frame, "device").locator("b")).to_have_text(gpu)
        peak = stat(frame, "peak")
        expect(peak.locator("b")).to_have_text(fmt_bytes(max(layer.peak_bytes for layer in ws.layers)))
        expect(peak).not_to_have_attribute("title", NOT_RECORDED)
        if run == "mi300x":
            shot(page, artifacts, "device-rocm")
        back_to_runs(frame)


def test_memory_not_recorded_reads_a_dash(device_tensorboard: TensorBoard, page: Page, artifacts: Path) -> None:
    ws = engine_summary(Path(device_tensorboard.logdir), "sd35")
    assert not ws.memory_recorded and ws.layers
    frame = open_tab(page, device_tensorboard.url)
    open_run(frame, "sd35")
    expect(stat(frame, "device").locator("b")).to_have_text("ROCm · AMD Instinct MI300X")
    # Mixed backends read as runs of layers: the text encoders' SDPA, T5's eager layers, the MMDiT's.
    runs, first = [], 0
    for i, layer in enumerate(ws.layers):
        if i + 1 == len(ws.layers) or ws.layers[i + 1].backend != layer.backend:
            span = f"L{ws.layers[first].layer}" + (f"\u2013{layer.layer}" if i > first else "")
            runs.append(f"{span} {layer.backend}")
            first = i + 1
    assert ws.backend == "mixed" and 1 < len(runs) < 10
    expect(stat(frame, "backend")).to_contain_text(f"({', '.join(runs)})")
    peak = stat(frame, "peak")
    expect(peak.locator("b")).to_have_text("\u2014")
    expect(peak).to_have_attribute("title", NOT_RECORDED)
    shot(page, artifacts, "memory-not-recorded")
    back_to_runs(frame)
    # The runs list's peak, now that the run is parsed: a dash for it, bytes for a run with memory.
    cell = frame.get_by_role("button", name="Open run sd35", exact=True).locator("td[data-col=peak]")
    expect(cell).to_have_text("\u2014")
    expect(cell).to_have_attribute("title", NOT_RECORDED)
