"""The Layers × phases chart (``views/layers.ts``) in a real browser: the stacked bars, the
chart-metric switch and the axis tooltip, against the analysis engine's figures. Screenshots go
to ``test-artifacts/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pages import canvas_png, engine_summary, expect_ink, fmt_flops, open_run, open_tab, shot, traces_tensorboard
from playwright.sync_api import Page, expect
from tracetools import trace_files

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events


def test_stacked_bar_chart_and_metric_switch(tensorboard: Any, browser_logdir: Path, page: Page,
                                             artifacts: Path) -> None:
    ws = engine_summary(browser_logdir, "demo/naive")
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    canvas = "section.layers .chart canvas"
    expect(frame.locator(canvas).first).to_be_visible()
    expect_ink(frame, canvas, [2000], "the bar chart")
    before = canvas_png(frame, canvas)

    chart_metric = frame.get_by_role("combobox", name="Chart metric")
    chart_metric.select_option("flops")
    expect(chart_metric).to_have_value("flops")
    frame.wait_for_function("png => document.querySelector('section.layers .chart canvas').toDataURL() !== png",
                            arg=before)
    expect_ink(frame, canvas, [2000], "the bar chart of FLOPs")
    # The axis tooltip over layer 0 now speaks FLOPs, with the engine's total for the layer.
    box = frame.locator("section.layers .chart").bounding_box()
    assert box is not None
    plot_left, plot_right = 70, 16  # the chart's grid margins (layers.ts)
    x0 = plot_left + (box["width"] - plot_left - plot_right) / len(ws.layers) / 2
    frame.locator("section.layers .chart").hover(position={"x": x0, "y": box["height"] - 60})
    tooltip = frame.locator("section.layers .chart div", has_text="total:").last
    expect(tooltip).to_contain_text("Layer 0")
    expect(tooltip).to_contain_text("FLOPs")
    expect(tooltip).to_contain_text(f"total: {fmt_flops(sum(p.flops for p in ws.layers[0].phases))}")
    shot(page, artifacts, "chart-flops")


def test_a_run_with_no_device_time_in_attention_opens_on_cpu_time(tmp_path_factory: pytest.TempPathFactory,
                                                                  builtin_logdir: Path, page: Page,
                                                                  artifacts: Path) -> None:
    """A trace with kernels (device "cuda") none of which ran in attention: Layers × phases opens
    on CPU time, a chart with bars, not on an empty device chart."""
    (source,) = trace_files(builtin_logdir / "naive")
    trace = json.loads(source.read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    last = max(spans, key=lambda e: e["ts"])
    # One kernel at the end of the last step, launched there by no op of attention.
    end = last["ts"] + last["dur"]
    trace["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": last["pid"], "tid": last["tid"],
         "ts": end - 4, "dur": 2, "args": {"correlation": 999999}},
        {"ph": "X", "cat": "kernel", "name": "void stray_kernel<float>()", "pid": 0, "tid": 7, "ts": end - 2,
         "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 999999}}]
    path = tmp_path_factory.mktemp("stray") / "w.1.pt.trace.json"
    path.write_text(json.dumps(trace))
    ws = summarize_trace(analyze(load_events(str(path))), file=str(path), worker="w", span="1")
    assert ws.device == "cuda" and ws.attention_device_us == 0 and ws.attention_cpu_us > 0  # the premise
    with traces_tensorboard(tmp_path_factory, {"stray": path}) as tb:
        frame = open_tab(page, tb.url)
        open_run(frame, "stray")
        expect(frame.get_by_role("combobox", name="Chart metric")).to_have_value("cpu_us")
        expect_ink(frame, "section.layers .chart canvas", [2000], "the bar chart of CPU time")
        shot(page, artifacts, "layers-no-device-time")
