"""What the integrations' tests share (importable as ``integration_runs``; fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tb_attn_plugin.types.schema import WorkerSummary

#: Findings whose premise is a measured time against a threshold (a share of tiny ops, a share of a
#: roof from the runner's probes of this machine, which the integrations do not run): a loaded
#: machine moves them, so two runs of one model need not agree on them.
TIMED_FINDINGS = frozenset({"dispatch-bound", "far-from-roof"})


def only_worker(path: Path) -> WorkerSummary:
    import tb_attn

    (run,) = tb_attn.load(str(path)).runs
    assert not run.errors, run.errors
    (worker,) = run.workers
    return worker


def run_dir_of(output_dir: Path) -> Path:
    """The Trainer's TensorBoard directory under ``output_dir`` (``runs/<time>_<host>``)."""
    (found,) = (output_dir / "runs").iterdir()
    return found
