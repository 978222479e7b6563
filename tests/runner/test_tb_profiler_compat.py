"""torch-tb-profiler, a declared dependency, loads the runner's traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY, profile_run
from torch_tb_profiler.consts import WORKER_PATTERN
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.run_generator import RunGenerator
from tracetools import trace_files

from runner.config import ProfileConfig
from runner.session import RunSpec, run_one


@pytest.mark.parametrize(("impl", "gzip"), [("naive", False), ("sdpa", True)])
def test_tb_profiler_parses_and_generates_our_runs(tmp_path: Path, impl: str, gzip: bool) -> None:
    if gzip:
        spec = RunSpec("builtin", TINY.replace(impl=impl), "run")
        run_one(spec, tmp_path, ProfileConfig(wait=0, active=2, gzip=True))
    else:
        profile_run(tmp_path, "run", impl=impl)
    (path,) = trace_files(tmp_path / "run")
    match = WORKER_PATTERN.match(path.name)
    assert match is not None
    data = RunProfileData.parse(match.group(1), None, str(path), str(tmp_path / "cache"))
    profile = RunGenerator(match.group(1), None, data).generate_run_profile()
    assert {v.name for v in profile.views} >= {"overall", "operator", "trace", "memory"}
    op_names = {row["name"] for row in profile.operation_table_by_name["data"]}
    core = "aten::softmax" if impl == "naive" else "aten::scaled_dot_product_attention"
    assert core in op_names
