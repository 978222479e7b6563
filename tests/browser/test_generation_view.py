"""The Generation view (``views/generation.ts``) in a real browser, on the ``generation_logdir`` runs
(a prompt, then six decode steps against a KV cache: contexts too close for a fit) and one run of
sixteen decode steps after a prompt of eight (a fit): the prefill against the decode step, each
decode step's times against its context with the fit or why there is none, the KV cache per step, the cache's figures
and the per-layer tables against the engine's ``generation`` (formatted as ``format.ts`` writes
them); the step picker naming each step by its role and context, and the Timeline following it;
and Compare's decode columns and context scaling for generation runs. Screenshots go to
``test-artifacts/`` (``generation*.png``) and ``/tmp/shots/``."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import GENERATION, profile_run
from pages import (
    BYTE_UNITS,
    TAB_FRAME,
    TIME_UNITS,
    axis_labels,
    chart_option,
    engine_summary,
    expect_ink,
    expect_still,
    fmt_bytes,
    fmt_flops,
    fmt_ms,
    fmt_share,
    fmt_us,
    one_unit,
    open_run,
    open_tab,
    shot,
    show_tab,
    to_fixed,
)
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import Generation

RUN = "builtin/sdpa/gen-p128-n6-dynamic"
DECODE_STEPS = 6
#: Contexts 9 to 24: wide enough (over 2x) for the engine to fit a·contextᵏ.
FIT_RUN = "builtin/sdpa/gen-p8-n16-dynamic"
SHOTS = Path("/tmp/shots")
DECODE_CHART = "[data-testid=gen-decode-chart]"
KV_CHART = "[data-testid=gen-kv-chart]"
PHASE_CHART = "[data-testid=gen-phase-chart]"
DOT = "\u00b7"


def fmt_ratio(r: float) -> str:
    """format.ts fmtRatio."""
    return f"{to_fixed(r, 0 if r >= 100 else 1 if r >= 10 else 2)}\u00d7"


@pytest.fixture(scope="module")
def logdir(generation_logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``generation_logdir``'s runs and ``FIT_RUN``."""
    out = tmp_path_factory.mktemp("generation-view") / "logdir"
    shutil.copytree(generation_logdir, out)
    result = profile_run(out, FIT_RUN, **{**GENERATION, "impl": "sdpa", "prompt_len": 8, "new_tokens": 16, "seq": 24})
    assert result.status == "ok", result.error
    return out


@pytest.fixture(scope="module")
def generation_ui(logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(logdir) as tb:
        yield tb


@pytest.fixture(scope="module")
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


def generation_of(logdir: Path, run: str) -> Generation:
    g = engine_summary(logdir, run).generation
    assert g is not None and g.prefill is not None and g.decode is not None, run
    return g


def open_generation(page: Page, tb: TensorBoard, run: str) -> Frame:
    frame = open_tab(page, tb.url)
    open_run(frame, run)
    show_tab(frame, "Generation")
    expect(frame.get_by_test_id("generation")).to_be_visible()
    return frame


def series(frame: Frame, selector: str) -> dict[str, dict]:
    return {s["name"]: s for s in chart_option(frame, selector)["series"]}


def test_generation_view_matches_the_engine(generation_ui: TensorBoard, logdir: Path, page: Page,
                                            artifacts: Path, shots: Path) -> None:
    g = generation_of(logdir, RUN)
    assert g.clock == "cpu" and g.batch == 2 and g.prompt_len == 128 and g.prefill and g.decode
    decode = [t for t in g.tokens if t.role == "decode"]
    assert len(decode) == DECODE_STEPS
    frame = open_generation(page, generation_ui, RUN)
    view = frame.get_by_test_id("generation")
    about = frame.get_by_test_id("gen-about")
    expect(about).to_contain_text(f"A prompt of 128 tokens (prefill), then {DECODE_STEPS} decode steps")
    expect(about).to_contain_text("batch 2 \u00b7 dynamic KV cache")

    # Prefill against decode: per step, and tokens per step (prompt × batch, and the batch).
    table = frame.get_by_test_id("gen-phases")
    for key, prefill, dec in (
        ("attention", fmt_us(g.prefill.attention_us), fmt_us(g.decode.attention_us)),
        ("step", fmt_us(g.prefill.step_us), fmt_us(g.decode.step_us)),
        ("kv-cache", fmt_us(g.prefill.kv_cache_us), fmt_us(g.decode.kv_cache_us)),
        ("tokens", str(128 * 2), "2"),
        ("per-token", fmt_us(g.prefill.attention_us / 256), fmt_us(g.decode.attention_us / 2)),
        ("flops", fmt_flops(g.prefill.flops), fmt_flops(g.decode.flops)),
        ("steps", "1", str(DECODE_STEPS)),
    ):
        row = table.locator(f"tr[data-row={key}]")
        expect(row.locator("td.prefill")).to_have_text(prefill)
        expect(row.locator("td.decode")).to_have_text(dec)
    expect_ink(frame, PHASE_CHART + " canvas", [800], "the prefill-against-decode bars")
    bars = series(frame, PHASE_CHART)
    assert bars["prefill step"]["data"][0] == pytest.approx(g.prefill.attention_us)
    assert bars["decode step"]["data"][0] == pytest.approx(g.decode.attention_us)

    # Each decode step against its context: three series of six dots. Six contexts one key apart:
    # no fit, and the note says why.
    dots = expect_decode_dots(frame, g)
    assert g.fit is None and g.fit_note
    assert "fit" not in dots
    expect(frame.get_by_test_id("gen-fit")).to_have_count(0)
    expect(frame.get_by_test_id("gen-fit-note")).to_have_text(g.fit_note)

    # Hovering a decode dot shows its step's figures.
    last = decode[-1]
    chart = frame.locator(DECODE_CHART)
    x, y = frame.eval_on_selector(DECODE_CHART, "(el, p) => el.echart.convertToPixel({seriesIndex: 0}, p)",
                                  [last.context, last.attention_us])
    tip = chart.locator("div", has_text=f"context {last.context} keys").last
    for _ in range(6):
        chart.hover(position={"x": x, "y": y})
        try:
            expect(tip).to_be_visible(timeout=3000)
            break
        except AssertionError:
            chart.hover(position={"x": 5, "y": 5})
    expect(tip).to_contain_text(f"step {last.step} \u00b7 decode \u00b7 context {last.context} keys")
    expect(tip).to_contain_text(f"attention (CPU): {fmt_us(last.attention_us)}")

    # The KV cache per step, the prefill included, what the core reads and what the step allocates,
    # on a byte axis of power-of-two steps.
    expect_ink(frame, KV_CHART + " canvas", [2000], "the KV chart")
    kv = series(frame, KV_CHART)
    for name, key in (("KV cache", "kv_bytes"), ("read by the core", "read_bytes"),
                      ("allocated in the KV cache phase", "kv_alloc_bytes")):
        assert [tuple(p) for p in kv[name]["data"]] == [(t.context, getattr(t, key)) for t in g.tokens], name
    unit, step = one_unit(axis_labels(frame, KV_CHART, "yAxis"), BYTE_UNITS)
    assert step >= 1 and int(step) & (int(step) - 1) == 0, (unit, step)

    # The cache's figures.
    for testid, text in (
        ("gen-kv-per-layer", fmt_bytes(g.kv_bytes_per_layer)),
        ("gen-kv-per-head", fmt_bytes(g.kv_bytes_per_head)),
        ("gen-kv-growth", f"{fmt_bytes(g.kv_bytes_per_token)} / decode step"),
        ("gen-read", f"{fmt_bytes(g.read_bytes_per_token)} / decode step"),
        ("gen-bandwidth", f"{fmt_bytes(g.achieved_bytes_per_s)}/s"),
    ):
        expect(frame.get_by_test_id(testid).locator("b")).to_have_text(text)
    assert g.kv_bytes_per_layer > 0 and g.achieved_bytes_per_s > 0
    expect(frame.get_by_test_id("gen-memory-check")).to_contain_text(g.kv_memory)
    reference = frame.get_by_test_id("gen-reference")
    if g.reference_bytes_per_s is None:
        expect(reference).to_have_text("No reference bandwidth recorded.")
    else:
        expect(reference).to_contain_text(f"{fmt_bytes(g.reference_bytes_per_s)}/s")
        share = to_fixed(g.achieved_bytes_per_s / g.reference_bytes_per_s * 100, 1)
        expect(frame.get_by_test_id("gen-bandwidth")).to_contain_text(f"({share} % of the reference)")
    # The prefill's and the decode steps' roofs, as the engine says (the Roofline tab has the peaks).
    for role, phase in (("prefill", g.prefill), ("decode", g.decode)):
        roof = phase.roof
        assert roof is not None, role
        stat_el = frame.get_by_test_id(f"gen-roof-{role}")
        expect(stat_el.locator("b")).to_have_text(roof.verdict)
        if roof.share is not None:
            expect(stat_el).to_contain_text(f"{fmt_share(roof.share)} of its ceiling")

    # The per-layer tables over the prefill step and over the decode steps.
    for role, phase in (("prefill", g.prefill), ("decode", g.decode)):
        rows = frame.get_by_test_id(f"gen-layers-{role}").locator("tbody tr")
        expect(rows).to_have_count(len(phase.layers))
        for layer in phase.layers:
            row = frame.get_by_test_id(f"gen-layers-{role}").locator(f"tr[data-layer='{layer.layer}']")
            expect(row.locator("th")).to_have_text(f"L{layer.layer}")
            expect(row.locator("td.time")).to_have_text(fmt_us(layer.cpu_us))
            expect(row.locator("td.flops")).to_have_text(fmt_flops(layer.flops))
            expect(row.locator("td.alloc")).to_have_text(fmt_bytes(layer.alloc_bytes))
            expect(row.locator(".backend-chip")).to_have_text(layer.backend)
    expect_still(frame)
    view.screenshot(path=str(shots / "generation.png"))
    shot(page, artifacts, "generation")

    # A click on a decode dot opens that step's timeline.
    chart.click(position={"x": x, "y": y})
    expect(frame.get_by_role("tab", name="Timeline", exact=True)).to_have_attribute("aria-selected", "true")
    expect(frame.get_by_role("combobox", name="Step")).to_have_value(str(last.step))
    named = f"Step {last.step} (decode, {last.context} keys): "
    expect(frame.locator("section.timeline p.muted")).to_contain_text(named)


def expect_decode_dots(frame: Frame, g: Generation) -> dict[str, dict]:
    """The decode chart's attention, core and KV-append dots, one per decode step at its context,
    on a context axis around them and a time axis in one unit; its series by name."""
    decode = [t for t in g.tokens if t.role == "decode"]
    expect_ink(frame, DECODE_CHART + " canvas", [2000], "the decode chart")
    dots = series(frame, DECODE_CHART)
    for name, key in (("attention", "attention_us"), ("K\u00b7V core", "core_us"), ("KV cache append", "kv_cache_us")):
        assert [tuple(p[:2]) for p in dots[name]["data"]] == [
            (t.context, pytest.approx(getattr(t, key))) for t in decode], name
    xaxis = chart_option(frame, DECODE_CHART)["xAxis"][0]
    assert xaxis["name"] == "context (keys)"
    assert xaxis["min"] < decode[0].context and xaxis["max"] > decode[-1].context
    one_unit(axis_labels(frame, DECODE_CHART, "yAxis"), TIME_UNITS)
    return dots


def test_decode_fit_over_a_wide_range_of_contexts(generation_ui: TensorBoard, logdir: Path, page: Page,
                                                  artifacts: Path, shots: Path) -> None:
    g = generation_of(logdir, FIT_RUN)
    decode = [t for t in g.tokens if t.role == "decode"]
    assert g.fit is not None and len(decode) == 16
    frame = open_generation(page, generation_ui, FIT_RUN)
    dots = expect_decode_dots(frame, g)
    # The fit a·contextᵏ drawn over the decode contexts, its exponent and R² in the legend.
    curve = dots["fit"]["data"]
    assert curve[0][0] == decode[0].context and curve[-1][0] == decode[-1].context
    assert curve[-1][1] == pytest.approx(g.fit.a * decode[-1].context ** g.fit.k)
    fit = frame.get_by_test_id("gen-fit")
    expect(fit).to_contain_text(f"k = {to_fixed(g.fit.k, 2)}")
    assert g.fit.r2 is not None
    expect(fit).to_contain_text(f"R\u00b2 {to_fixed(g.fit.r2, 2)}, {g.fit.points} points")
    note = frame.get_by_test_id("gen-fit-note")  # a poor fit (R² under 0.5) says what it means
    if g.fit_note:
        expect(note).to_contain_text(g.fit_note[:60])
    else:
        expect(note).to_have_count(0)
    assert g.per_key_us is not None
    expect(frame.get_by_test_id("gen-line-fit")).to_contain_text(f"{fmt_us(g.per_key_us)} per key")
    expect_still(frame)
    frame.get_by_test_id("generation").screenshot(path=str(shots / "generation_fit.png"))
    shot(page, artifacts, "generation-fit")


def test_step_picker_names_steps_by_role_and_context(generation_ui: TensorBoard, logdir: Path,
                                                     page: Page, artifacts: Path) -> None:
    g = generation_of(logdir, RUN)
    frame = open_tab(page, generation_ui.url)
    open_run(frame, RUN)
    picker = frame.get_by_role("combobox", name="Step")
    labels = [f"{t.step} {DOT} {t.role} {DOT} {t.context} keys" for t in g.tokens]
    expect(picker.locator("option")).to_have_text(labels)
    assert sum(1 for t in g.tokens if t.role == "decode") == DECODE_STEPS
    # A decode step picked by its context: the timeline shows it, named.
    t = next(t for t in g.tokens if t.role == "decode" and t.context == 131)
    show_tab(frame, "Timeline")
    picker.select_option(label=f"{t.step} {DOT} decode {DOT} 131 keys")
    expect(picker).to_have_value(str(t.step))
    expect(frame.locator("section.timeline p.muted")).to_contain_text(f"Step {t.step} (decode, 131 keys): ")
    expect_ink(frame, "section.timeline canvas", [2000], "the timeline of a decode step")
    shot(page, artifacts, "generation-timeline")


def test_no_generation_tab_without_a_generation(tensorboard: TensorBoard, page: Page) -> None:
    """A run without a generation offers no Generation tab; opened with that tab remembered (the
    tab's session), it falls back to its layers."""
    frame = open_tab(page, tensorboard.url)
    frame.evaluate("""() => sessionStorage.setItem("tb-attn.view",
                                                JSON.stringify({run: "demo/naive", tab: "generation"}))""")
    page.reload()
    deadline = time.monotonic() + 30
    while (frame := next((f for f in page.frames if TAB_FRAME in f.url), None)) is None:
        assert time.monotonic() < deadline, "no tab after the reload"
        page.wait_for_timeout(50)
    expect(frame.locator(".run-title")).to_have_text("demo/naive")
    expect(frame.get_by_role("tab", name="Layers \u00d7 phases", exact=True)).to_have_attribute("aria-selected", "true")
    expect(frame.get_by_role("tab", name="Generation", exact=True)).to_have_count(0)
    expect(frame.locator("section.layers .chart canvas")).to_be_visible()


def _compare(frame: Frame, runs: tuple[str, ...]) -> None:
    for run in runs:
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expect(frame.get_by_test_id("compare-table")).to_be_visible(timeout=60_000)


def test_compare_shows_decode_per_token(generation_ui: TensorBoard, logdir: Path, page: Page,
                                        artifacts: Path, shots: Path) -> None:
    runs = ("builtin/naive/gen-p128-n6-dynamic", "builtin/sdpa/gen-p128-n6-dynamic")
    found = {r.name: r for r in resolve_runs(str(logdir))}
    loader = Loader()
    want = compare([loader.summarize_run(found[r]) for r in runs])
    assert want.baseline == runs[0]
    frame = open_tab(page, generation_ui.url)
    _compare(frame, runs)
    table = frame.get_by_test_id("compare-table")
    expect(table.locator("thead")).to_contain_text("decode / step")
    expect(table.locator("thead")).to_contain_text("KV cache")
    for r in want.runs:
        assert r.decode is not None
        row = table.locator("tr", has=frame.get_by_role("link", name=r.run, exact=True)).first
        decode = row.locator("td.decode")
        if r.run == want.baseline:
            expect(decode).to_have_text(fmt_us(r.decode.us_per_step))
        else:
            assert r.ratio.decode_us_per_step is not None
            expect(decode).to_have_text(f"{fmt_us(r.decode.us_per_step)} {fmt_ratio(r.ratio.decode_us_per_step)}")
        kv = row.locator("td.kv-cache")
        expect(kv.locator(".kv-kind")).to_have_text(str(r.decode.kv_cache))
        expect(kv.locator(".kv-heads")).to_have_text(f"{r.decode.kv_heads} KV heads")
        expect(kv.locator(".kv-read")).to_have_text(f"reads {fmt_bytes(r.decode.read_bytes_per_token)}")
    # Scaling: against the decode context, in its own panel; one point each, so no fit.
    panel = frame.get_by_test_id("decode-scaling-chart")
    expect(panel).to_be_visible()
    expect(frame.get_by_test_id("scaling-chart")).to_be_hidden()
    expect(panel.locator(".chart-title").first).to_have_text(
        "Decode attention CPU time per decode step vs. context (keys)")
    expect_ink(frame, "[data-testid=decode-scaling-chart] canvas", [1000, 1000], "the decode scaling charts")
    assert chart_option(frame, "[data-testid=decode-scaling-chart] .chart")["xAxis"][0]["name"] == "context (keys)"
    expect(frame.locator(".compare-scaling .note")).to_contain_text("differ only in their prompt length")
    expect_still(frame)
    frame.locator("section.compare-page").screenshot(path=str(shots / "generation_compare.png"))
    shot(page, artifacts, "generation-compare")


def test_compare_fits_decode_against_context(generation_ui: TensorBoard, logdir: Path, page: Page,
                                             artifacts: Path) -> None:
    """Three prompt lengths: one series against the context, fitted, its points at the decode
    steps' mean contexts."""
    from tb_attn_plugin.analysis.cross_run.scaling import scaling

    runs = tuple(f"builtin/sdpa/gen-p{p}-n6-dynamic" for p in (64, 128, 256))
    found = {r.name: r for r in resolve_runs(str(logdir))}
    (series_,) = scaling([Loader().summarize_run(found[r]) for r in runs]).series
    assert series_.x == "context" and series_.time_fit is not None and series_.memory_fit is not None
    frame = open_tab(page, generation_ui.url)
    _compare(frame, runs)
    panel = frame.get_by_test_id("decode-scaling-chart")
    expect(panel.locator(".legend-item")).to_have_count(2)
    expect(panel.locator(".legend").first).to_contain_text(f"k = {to_fixed(series_.time_fit.k, 2)}")
    expect(panel.locator(".legend").nth(1)).to_contain_text(f"k = {to_fixed(series_.memory_fit.k, 2)}")
    expect_ink(frame, "[data-testid=decode-scaling-chart] canvas", [1000, 1000], "the decode scaling charts")
    option = chart_option(frame, "[data-testid=decode-scaling-chart] > div:nth-child(2) .chart")
    measured = next(s for s in option["series"] if s["name"] == "measured 0")
    assert [p["value"] for p in measured["data"]] == [[p.seq, pytest.approx(p.alloc_bytes)] for p in series_.points]
    expect(frame.locator(".compare-scaling .note")).to_have_count(0)
    shot(page, artifacts, "generation-compare-fit")


def test_runs_list_gives_decode_per_token(generation_ui: TensorBoard, logdir: Path, page: Page) -> None:
    """A generation run's figures in the runs list are per decode step, over its decode steps alone
    (a mean over the prefill and the decode steps would describe neither), with the prefill in the
    tooltip."""
    g = generation_of(logdir, RUN)
    assert g.decode is not None and g.prefill is not None
    decode = [t.attention_us for t in g.tokens if t.role == "decode"]
    frame = open_tab(page, generation_ui.url)
    cell = frame.get_by_role("button", name=f"Open run {RUN}", exact=True).locator("td[data-col=attention]")
    expect(cell.locator(".fig-value")).to_be_visible(timeout=60_000)
    expect(cell.locator(".fig-value")).to_have_text(fmt_ms(g.decode.attention_us))
    expect(cell.locator(".clock")).to_have_text("cpu \u00b7 decode")
    expect(cell.locator(".spread")).to_have_text(f"{fmt_ms(min(decode))}\u2013{fmt_ms(max(decode))}")
    title = cell.get_attribute("title") or ""
    assert f"per decode step (one token per sequence), mean of {len(decode)} decode steps" in title
    assert f"the prefill: {fmt_us(g.prefill.attention_us)}" in title
