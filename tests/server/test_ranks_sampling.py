"""/ranks?ranks=0-7,512: rank sampling, where only the selected ranks' traces are ever parsed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from manyruns import write_ranked_run
from webtools import BASE, get, get_json, plugin_client

from tb_attn_plugin.engine import loader as loader_module
from tb_attn_plugin.engine.ranksel import parse_ranks
from tb_attn_plugin.server.service import Service

RANKS = 16


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    """``big``: 16 ranks, ``host_rank{r}.{1000 + r}.pt.trace.json``, copies of one runner trace."""
    write_ranked_run(tmp_path / "logdir" / "big", builtin_logdir / "naive", RANKS)
    return tmp_path / "logdir"


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every trace file parsed, by file name."""
    calls: Counter[str] = Counter()
    real = loader_module.load_events

    def load_events(path: str, **kwargs: object) -> object:
        calls[Path(path).name] += 1
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loader_module, "load_events", load_events)
    return calls


def _file(rank: int) -> str:
    return f"host_rank{rank}.{1000 + rank}.pt.trace.json"


def test_a_selection_parses_only_its_ranks(logdir: Path, parsed: Counter[str]) -> None:
    client = plugin_client(logdir)
    body = get_json(client, f"{BASE}/ranks?run=big&ranks=0-3")
    assert [r["rank"] for r in body["ranks"]] == [0, 1, 2, 3]
    assert body["ranks_total"] == RANKS and body["ranks_selected"] == "0-3"
    assert parsed == Counter({_file(r): 1 for r in range(4)})
    # Written as anyone types it, answered normalized: sorted, merged, spaces and empty parts gone.
    body = get_json(client, f"{BASE}/ranks?run=big&ranks=%203,%2012,,0-2,11")
    assert body["ranks_selected"] == "0-3,11-12" and [r["rank"] for r in body["ranks"]] == [0, 1, 2, 3, 11, 12]
    assert parsed == Counter({_file(r): 1 for r in (0, 1, 2, 3, 11, 12)})  # ranks 0-3 came from the cache
    # Figures over the selection only: the median, the columns and the stragglers are of these ranks.
    assert body["columns"][0]["column"] == "attention_best"
    assert body["columns"][0]["max_rank"] in (0, 1, 2, 3, 11, 12)
    # A range past the last rank takes the ranks there are.
    body = get_json(client, f"{BASE}/ranks?run=big&ranks=14-99&margin=0.5")
    assert [r["rank"] for r in body["ranks"]] == [14, 15] and body["ranks_selected"] == "14-99"
    assert body["margin"] == 0.5 and parsed[_file(14)] == parsed[_file(15)] == 1 and sum(parsed.values()) == 8


def test_no_selection_is_every_rank(logdir: Path, parsed: Counter[str]) -> None:
    client = plugin_client(logdir)
    for url in (f"{BASE}/ranks?run=big", f"{BASE}/ranks?run=big&ranks="):
        body = get_json(client, url)
        assert [r["rank"] for r in body["ranks"]] == list(range(RANKS))
        assert body["ranks_total"] == RANKS and body["ranks_selected"] is None
    assert parsed == Counter({_file(r): 1 for r in range(RANKS)})


@pytest.mark.parametrize(("spec", "message"), [
    ("x", "bad rank selection 'x': use ranks and ranges such as 0-7,512"),
    ("3-1", "bad rank range '3-1': ranks are 0.."),
    ("-1", "bad rank selection '-1'"),
    (",", "empty rank selection"),
    ("1" * 5000, "a rank selection is at most 4096 characters"),
])
def test_a_bad_selection_is_a_400_with_the_parsers_message(logdir: Path, parsed: Counter[str], spec: str,
                                                           message: str) -> None:
    response = get(plugin_client(logdir), f"{BASE}/ranks?run=big&ranks={spec}")
    assert response.status_code == 400
    text = response.get_data(as_text=True)
    assert message in text and "\n" not in text.strip() and len(text) < 300
    assert not parsed


def test_a_selection_of_no_trace_is_a_404(logdir: Path, parsed: Counter[str]) -> None:
    client = plugin_client(logdir)
    response = get(client, f"{BASE}/ranks?run=big&ranks=16-20,100")
    assert response.status_code == 404
    assert "run 'big' has no trace of ranks 16-20,100 (its ranks are 0-15)" in response.get_data(as_text=True)
    assert not parsed
    # An unknown run stays the usual 404, and a bad selection of it a 400 (arguments first).
    assert "no run named 'nope'" in get(client, f"{BASE}/ranks?run=nope&ranks=0").get_data(as_text=True)
    assert get(client, f"{BASE}/ranks?run=nope&ranks=x").status_code == 400


def test_workers_without_ranks_in_their_names_are_taken_by_position(tmp_path: Path, builtin_logdir: Path,
                                                                   parsed: Counter[str]) -> None:
    """``host_pid`` workers (tensorboard_trace_handler's names): rank r is the r-th worker in sorted order."""
    ranks_dir = tmp_path / "src"
    write_ranked_run(ranks_dir, builtin_logdir / "naive", 4)
    run = tmp_path / "logdir" / "pids"
    run.mkdir(parents=True)
    for rank, pid in enumerate((101, 205, 307, 409)):
        (ranks_dir / _file(rank)).rename(run / f"host_{pid}.1.pt.trace.json")
    body = get_json(plugin_client(tmp_path / "logdir"), f"{BASE}/ranks?run=pids&ranks=1-2")
    assert [r["worker"] for r in body["ranks"]] == ["host_205", "host_307"] and body["ranks_total"] == 4
    assert set(parsed) == {"host_205.1.pt.trace.json", "host_307.1.pt.trace.json"}


def test_the_service_summarizes_a_reduced_run_apart_from_the_whole(logdir: Path) -> None:
    """The reduced run is not the registry's object: its summary is of its files only, and the
    whole run's answer afterwards has every rank (nothing cached per run object)."""
    service = Service(str(logdir), wait_s=60.0)
    some = service.ranks("big", margin=None, selection=parse_ranks("5,7"))
    assert [r.rank for r in some.ranks] == [5, 7] and some.ranks_selected == "5,7" and some.ranks_total == RANKS
    every = service.ranks("big", margin=None)
    assert len(every.ranks) == RANKS and every.ranks_selected is None
    assert len(service.summary("big", None, None).workers) == RANKS
