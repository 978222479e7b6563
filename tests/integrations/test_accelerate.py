"""Hugging Face Accelerate: ``profile_kwargs`` with ``instrument`` in a plain loop under
``accelerator.profile()``, writing scoped traces beside the tracker's scalars; and Accelerate's own
``ProfileKwargs(output_trace_dir=...)`` files (``profile_<rank>.json``), found by their content and
inferred."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from integration_runs import only_worker

from devtools.training import accelerate_loop
from tb_attn.integrations import instrument, profile_kwargs
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.names import METADATA_FILE

pytestmark = pytest.mark.slow


def _loop(*args: object, **kwargs: object) -> list[float]:
    with warnings.catch_warnings():
        # torch's advice when a schedule ends a cycle, from the loop's own prof.step()
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
        return accelerate_loop(*args, **kwargs)  # type: ignore[arg-type]


def test_profile_kwargs_writes_scoped_traces_beside_the_scalars(tmp_path: Path, runner_twin: WorkerSummary) -> None:
    from devtools.training import tiny_llama

    model = tiny_llama()
    _loop(tmp_path, "my-run", model=model, scopes=instrument,
          kwargs_handlers=[profile_kwargs(tmp_path / "my-run", model=model)])
    run_dir = tmp_path / "my-run"
    assert list(run_dir.glob("events.out.tfevents.*")), "the tracker's scalars"
    (trace,) = run_dir.glob("*.pt.trace.json")
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["status"] == "ok" and meta["traces"] == [trace.name]
    assert meta["integration"]["name"] == "accelerate" and meta["model"] == "LlamaForCausalLM"
    mine = only_worker(run_dir)
    assert mine.step_count == 5 and not any(x.inferred for x in mine.layers)
    assert [(x.layer, x.module, x.backend, x.flops) for x in mine.layers] == \
        [(x.layer, x.module, x.backend, x.flops) for x in runner_twin.layers]


def test_profile_kwargs_keeps_what_it_sets() -> None:
    with pytest.raises(ValueError, match="sets output_trace_dir itself"):
        profile_kwargs("runs/x", output_trace_dir="elsewhere")
    kwargs = profile_kwargs("runs/x", with_stack=True, skip_first=0, active=2)
    assert kwargs.record_shapes and kwargs.profile_memory and kwargs.with_stack
    assert kwargs.schedule_option == {"skip_first": 0, "wait": 0, "warmup": 1, "active": 2, "repeat": 1}
    assert kwargs.output_trace_dir is None


def test_accelerates_own_trace_files_are_found_and_inferred(tmp_path: Path) -> None:
    from accelerate.utils import ProfileKwargs

    out = tmp_path / "plain"
    _loop(tmp_path, "plain", steps=3,
          kwargs_handlers=[ProfileKwargs(output_trace_dir=str(out), record_shapes=True, activities=["cpu"])])
    assert (out / "profile_0.json").is_file()
    worker = only_worker(out)
    assert worker.worker == "profile_0"
    assert [(x.layer, x.backend) for x in worker.layers] == [(0, "cpu-flash"), (1, "cpu-flash")]
    assert all(x.inferred for x in worker.layers)
