"""The Layers × heads heatmap (``views/heads.ts``) in a real browser: measured head scopes and
heads derived from the layer, the metric named above the chart, and derived heads explained in
words. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pages import back_to_runs, engine_summary, expect_ink, open_run, open_tab, shot, show_tab
from playwright.sync_api import Page, expect

from tb_attn_plugin.vocab.scopes import UNSPLIT_PHASES, in_order


def test_heads_heatmap_marks_derived_heads(tensorboard: Any, page: Page, artifacts: Path,
                                           browser_logdir: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    derived = "derived: split evenly from the layer"
    for run, is_derived in (("demo/naive", True), ("demo/naive-per-head", False)):
        ws = engine_summary(browser_logdir, run)
        heads = [h for layer in ws.layers for h in layer.heads]
        assert heads and all(h.derived == is_derived for h in heads), run
        open_run(frame, run)
        show_tab(frame, "Layers \u00d7 heads")
        legend = frame.locator("section.heads .legend")
        expect(legend).to_be_visible()
        expect(frame.locator("section.heads .chart canvas").first).to_be_visible()
        expect_ink(frame, "section.heads .chart canvas", [2000], f"{run}'s heatmap")
        # The heatmap names its metric: the figure, its clock, forward only, and over which steps.
        caption = frame.get_by_test_id("heads-metric")
        steps = f"the {ws.step_count} profiled steps" if ws.step_count > 1 else "the profiled step"
        where = "derived from the layer" if is_derived else "in each head's own scope"
        expect(caption).to_have_text(
            f"shown: CPU time per step by layer and head (CPU clock), forward only, {where}; mean over {steps}.")
        # Measured heads whose steps spread over 20 % are counted in a "noisy" mark; derived
        # heads, a share of their layer, carry no spread of their own.
        noisy = sum(bool(h.spread.get("cpu_us") and h.spread["cpu_us"].noisy) for h in heads)
        marks = frame.get_by_test_id("noisy-heads")
        if noisy:
            expect(marks).to_have_text(f"\u00b1 {noisy} noisy head{'' if noisy == 1 else 's'}")
        else:
            expect(marks).to_have_count(0)
        assert not is_derived or noisy == 0
        note = frame.get_by_test_id("derived-note")
        if is_derived:
            expect(legend).to_contain_text(derived)
            expect(legend).not_to_contain_text("measured")
            # Derived heads say in words what was split: the core phases, not the projections.
            unsplit = ", ".join(in_order(UNSPLIT_PHASES))  # qkv_proj, out_proj, comm, other
            expect(note).to_contain_text("an even share of the layer's core phases only, everything but "
                                         f"{unsplit}, which are not split by head")
        else:
            expect(legend).to_contain_text("measured (head scopes)")
            expect(legend).not_to_contain_text("derived")
            expect(note).to_have_count(0)
        shot(page, artifacts, "heads-" + run.split("/")[1])
        # Another metric is named as it is chosen.
        frame.get_by_role("combobox", name="Heatmap metric").select_option("flops")
        expect(caption).to_contain_text("shown: FLOPs per step by layer and head (counted from the ops' input shapes)")
        frame.get_by_role("combobox", name="Heatmap metric").select_option("cpu_us")
        show_tab(frame, "Layers \u00d7 phases")
        back_to_runs(frame)
