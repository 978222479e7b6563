"""/ranks through TensorBoard's WSGI app, and `tb-attn ranks` in the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracetools import as_ranks
from webtools import BASE, get, get_json, plugin_client

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.analysis.cross_run.ranks import ranks
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.loader import Loader, resolve_runs


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    as_ranks(builtin_logdir / "naive", tmp_path / "logdir" / "tp", slow_rank=1, slow_us=500_000.0, heads_per_rank=2)
    as_ranks(builtin_logdir / "sdpa", tmp_path / "logdir" / "single")
    for extra in (tmp_path / "logdir" / "single").glob("host_rank1.*"):
        extra.unlink()
    return tmp_path / "logdir"


def test_ranks_route(logdir: Path) -> None:
    client = plugin_client(logdir)
    body = get_json(client, f"{BASE}/ranks?run=tp")
    assert body["schema"] == "tb-attn.ranks/2" and body["clock"] == "cpu" and body["margin"] == 0.2
    assert body["metric"] == "attention_best" and "fastest step" in body["metric_label"]
    assert [r["rank"] for r in body["ranks"]] == [0, 1] and [r["heads"] for r in body["ranks"]] == [[0, 1], [2, 3]]
    assert body["ranks"][1]["straggler"] and {s["rank"] for s in body["stragglers"]} == {1}
    assert body["heads_sharded"] and body["heads_complete"] and body["head_count"] == 4
    (strict,) = [s for s in body["stragglers"] if s["metric"] == "attention"]
    margin = min(strict["ratio"] - 1 + 1e-3, 10.0)  # just above rank 1's ratio, within the allowed range
    wide = get_json(client, f"{BASE}/ranks?run=tp&margin={margin}")
    assert wide["margin"] == margin
    # A wider margin keeps the stragglers that exceed it (their medians and gaps are the margin's own):
    # not rank 1's attention, unless it ran over 11 times its median, where the margin stops at 10.
    kept = [(s["rank"], s["metric"]) for s in body["stragglers"] if s["ratio"] > 1 + margin]
    assert [(s["rank"], s["metric"]) for s in wide["stragglers"]] == kept
    assert ((1, "attention") in kept) == (strict["ratio"] > 11)
    single = get_json(client, f"{BASE}/ranks?run=single")
    assert len(single["ranks"]) == 1 and single["stragglers"] == []
    for url, status in ((f"{BASE}/ranks", 400), (f"{BASE}/ranks?run=nope", 404), (f"{BASE}/ranks?run=tp&margin=x", 400),
                        (f"{BASE}/ranks?run=tp&margin=-1", 400), (f"{BASE}/ranks?run=tp&margin=nan", 400)):
        assert get(client, url).status_code == status, url


def test_ranks_cli(logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ranks", str(logdir)]) == 0
    out = capsys.readouterr().out
    view = ranks(Loader().summarize_run(next(r for r in resolve_runs(str(logdir)) if r.name == "tp")))
    # The CLI names the metric, the other columns' figure and the median in the route's words.
    assert out.startswith(f"tp: 2 ranks\nfastest: {view.metric_label} (the straggler metric)\n"
                          f"other columns: {view.means_label}\nmedian: {view.median_label}\n")
    (attention,) = [s for s in view.stragglers if s.metric == "attention"]
    assert "STRAGGLER" in out and (f"straggler: rank 1 (host_rank1): attention in the fastest step: "
                                   f"{wording.ms(attention.value_us)} ms against the median over ranks "
                                   f"{wording.ms(attention.median_us)} ms") in out
    # The table's "median" row in the fastest-step column is the straggler's median.
    (median_row,) = [line for line in out.splitlines() if line.startswith("all") and " median " in line]
    assert median_row.split()[2] == wording.ms(attention.median_us)
    assert f"heads: 4 per layer, sharded across ranks (tensor parallel); the map shows {view.heads_label}" in out
    assert main(["ranks", str(logdir), "--fail-on-straggler"]) == 1
    capsys.readouterr()
    # Without --fail-on-straggler a straggler is reported, not failed on.
    assert main(["ranks", str(logdir), "--run", "tp", "--format", "json", "--margin", "9.5"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["run"] == "tp" and body["margin"] == 9.5 and body["min_gap_us"] == 500.0
    assert [(s["rank"], s["metric"]) for s in body["stragglers"]] == [(s.rank, s.metric) for s in view.stragglers
                                                                      if s.ratio > 1 + 9.5]
    assert main(["ranks", str(logdir), "--run", "nope"]) == 2
    assert main(["ranks", str(logdir / "single")]) == 2
    assert "no run with two or more workers" in capsys.readouterr().err
