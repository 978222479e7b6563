"""One log directory as Hugging Face's Trainer leaves it with ``AttentionProfilerCallback``: its
TensorBoard scalars and tb-attn's scoped trace in one run directory, served by one ``tensorboard
--logdir``. The Scalars tab shows the loss; the Attention tab lists the same run, ready, with the
model and the attention the callback recorded. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pages import engine_summary, open_run, open_tab, shot
from playwright.sync_api import Page, expect

from devtools.tbserver import TensorBoard
from devtools.training import hf_train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tb_attn.integrations import AttentionProfilerCallback

    out = tmp_path_factory.mktemp("trainer-output")
    hf_train(out, callbacks=[AttentionProfilerCallback()])
    return out


@pytest.fixture(scope="module")
def trainer_tensorboard(trainer_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(trainer_logdir) as tb:
        yield tb


def _run_name(logdir: Path) -> str:
    (run_dir,) = (logdir / "runs").iterdir()
    return f"runs/{run_dir.name}"


def test_scalars_and_attention_side_by_side(trainer_tensorboard: Any, trainer_logdir: Path, page: Page,
                                            artifacts: Path) -> None:
    run = _run_name(trainer_logdir)
    page.goto(trainer_tensorboard.url + "#scalars")
    expect(page.get_by_text("train/loss").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text(run).first).to_be_visible()
    shot(page, artifacts, "trainer-scalars")

    ws = engine_summary(trainer_logdir, run)
    frame = open_tab(page, trainer_tensorboard.url)
    row = frame.get_by_role("button", name=f"Open run {run}", exact=True)
    expect(row).to_contain_text("LlamaForCausalLM")
    expect(row.locator("td[data-col=share]")).not_to_have_text("\u2026")
    shot(page, artifacts, "trainer-runs")
    open_run(frame, run)
    expect(frame.get_by_test_id("run-headline")).to_have_text(ws.headline)
    rows = frame.locator("table.layers-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("model.layers.0.self_attn")
    expect(rows.first).not_to_contain_text("inferred")
    shot(page, artifacts, "trainer-run")
