"""/runs stays light whatever the runs' metadata files hold, and /metadata sends one run's whole file.

Before (issue 34): /runs carried every run's whole ``tb_attn_run.json``, so 100 runs with a
metadata file of about 1 MiB each made an 88 MB body, sent again at every poll.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from manyruns import SHOWN, hostile_metadata
from webtools import BASE, get, get_json, plugin_client

from tb_attn_plugin.server.registry import KEPT_BYTES, KEPT_VALUE_BYTES, Registry, kept_metadata
from tb_attn_plugin.server.run_info import ELLIPSIS, ERROR_CHARS, INFO_CHARS

HOSTILE_RUNS = 100


@pytest.fixture(scope="module")
def hostile_logdir(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Path:
    """``HOSTILE_RUNS`` runs ``kind<k>/run-<i>`` of one real trace each, with the ``i``-th hostile
    metadata file of ``manyruns.hostile_metadata`` (kind ``i % 4``), all about 1 MiB."""
    logdir = tmp_path_factory.mktemp("hostile-metadata")
    source = builtin_logdir / "naive"
    (trace,) = [f for f in source.iterdir() if ".pt.trace.json" in f.name]
    template = json.loads((source / "tb_attn_run.json").read_text())
    for i in range(HOSTILE_RUNS):
        run = logdir / f"kind{i % 4}" / f"run-{i:03d}"
        run.mkdir(parents=True)
        os.link(trace, run / trace.name)
        (run / "tb_attn_run.json").write_bytes(hostile_metadata(i, template))
    return logdir


@pytest.fixture(scope="module")
def client(hostile_logdir: Path) -> Any:
    """One client for the module: listing the hostile runs reads 100 MiB of metadata."""
    return plugin_client(hostile_logdir, prefetch_files=0)


def _runs(client: Any) -> tuple[int, dict[str, dict[str, Any]]]:
    response = get(client, f"{BASE}/runs")
    assert response.status_code == 200
    body = response.get_data()
    return len(body), {r["run"]: r for r in json.loads(body)["runs"]}


def test_a_hundred_runs_of_a_mebibyte_of_metadata_list_in_under_a_megabyte(hostile_logdir: Path, client: Any) -> None:
    on_disk = sum(p.stat().st_size for p in hostile_logdir.glob("*/*/tb_attn_run.json"))
    assert on_disk > 95 * (1 << 20)
    size, runs = _runs(client)
    assert len(runs) == HOSTILE_RUNS
    assert size < 1_000_000, size
    for name, entry in runs.items():
        info = entry["info"]
        assert info is not None, name  # read (under the 1 MiB limit), and cut down
        for key, value in info.items():
            if isinstance(value, str):
                assert len(value) <= (ERROR_CHARS if key == "error" else INFO_CHARS), (name, key)
                assert value.endswith(ELLIPSIS) == (key in info["clipped"]), (name, key)
        kind = name.split("/")[0]
        if kind == "kind0":  # a model string of a mebibyte: its first characters, and its length
            assert info["model"] == "m" * (INFO_CHARS - 1) + ELLIPSIS and info["clipped"]["model"] > 1_000_000
            assert info["seq"] == 16 and info["impl"] == "naive"
        elif kind == "kind1":  # every field shown long, and numbers that are not numbers
            assert set(info["clipped"]) == set(SHOWN)
            assert (info["seq"], info["batch"], info["world_size"]) == (None, None, None)
        else:  # objects thousands of keys wide, or 200 levels deep, where strings and numbers go
            assert info["model"] is None and info["seq"] is None and info["clipped"] == {}


def test_metadata_sends_the_whole_file_of_one_run(hostile_logdir: Path, client: Any) -> None:
    response = get(client, f"{BASE}/metadata?run=kind0/run-000")
    assert response.status_code == 200 and response.mimetype == "application/json"
    body = json.loads(response.get_data())
    assert body["schema"] == "tb-attn.metadata/1" and body["run"] == "kind0/run-000"
    on_disk = json.loads((hostile_logdir / "kind0" / "run-000" / "tb_attn_run.json").read_bytes())
    assert body["metadata"] == on_disk and len(body["metadata"]["model"]) > 1_000_000
    deep = get_json(client, f"{BASE}/metadata?run=kind3/run-003")["metadata"]
    assert deep["model"]["a"][0]["a"][0]["a"][0] is not None
    # Nothing was parsed for it: the run is still unloaded.
    assert _runs(client)[1]["kind0/run-000"]["status"] == "unloaded"


def test_metadata_of_a_run_without_it_is_null_and_of_no_run_a_404(tmp_path: Path, builtin_logdir: Path) -> None:
    source = builtin_logdir / "naive"
    (trace,) = [f for f in source.iterdir() if ".pt.trace.json" in f.name]
    (tmp_path / "bare").mkdir()
    os.link(trace, tmp_path / "bare" / trace.name)
    client = plugin_client(tmp_path, prefetch_files=0)
    assert get_json(client, f"{BASE}/metadata?run=bare") == {"schema": "tb-attn.metadata/1", "run": "bare",
                                                             "metadata": None, "note": None}
    assert _runs(client)[1]["bare"]["info"] is None
    missing = get(client, f"{BASE}/metadata?run=nope")
    assert missing.status_code == 404 and "no run named 'nope'" in missing.get_data(as_text=True)
    assert get(client, f"{BASE}/metadata").status_code == 400


def test_the_listing_keeps_a_bounded_part_of_each_metadata_file(hostile_logdir: Path) -> None:
    """The registry holds every listed run's metadata: 16,384 runs of 1 MiB each would have been
    16 GiB of parsed JSON. It keeps what the runs list shows (from the whole file) and the values
    the analysis reads, at most ``KEPT_BYTES`` a run; ``/metadata`` reads the file again."""
    registry = Registry(str(hostile_logdir))
    runs = registry.runs()
    assert len(runs) == HOSTILE_RUNS
    for run in runs:
        kept = registry.metadata(run)
        assert kept is not None and len(json.dumps(kept)) <= KEPT_BYTES
        info = registry.info(run)
        assert info is not None and all(len(v) <= ERROR_CHARS for v in msgspec.structs.asdict(info).values()
                                        if isinstance(v, str))
    # What the analysis reads is kept where it is small, as the runner writes it.
    whole = json.loads((Path(runs[0].metadata_path or "")).read_bytes())
    small = {k: v for k, v in whole.items() if len(json.dumps(v)) < 1000}
    assert small.items() <= (registry.metadata(runs[0]) or {}).items()


def test_kept_metadata_by_hand() -> None:
    small = {"config": {"seq": 512}, "model": "builtin"}
    assert kept_metadata(small) == small and kept_metadata(None) is None
    big = {"model": "x" * (KEPT_VALUE_BYTES + 1), "config": {"seq": 512}, **{f"k{i}": "y" * 10_000 for i in range(20)}}
    kept = kept_metadata(big) or {}
    assert "model" not in kept and kept["config"] == {"seq": 512}
    assert len(json.dumps(kept)) <= KEPT_BYTES and len(kept) == 1 + (KEPT_BYTES - 20) // 10_012
