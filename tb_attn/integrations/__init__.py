"""Attention-scoped profiles from the training loops people use, into the log directory their
TensorBoard scalars already go to (docs/integrations.md):

    from tb_attn.integrations import AttentionProfilerCallback       # Hugging Face Trainer
    trainer = Trainer(..., callbacks=[AttentionProfilerCallback()])

    from tb_attn.integrations import AttentionProfiler               # PyTorch Lightning
    trainer = Trainer(..., profiler=AttentionProfiler())

    from tb_attn.integrations import instrument, profile_kwargs      # Accelerate
    accelerator = Accelerator(kwargs_handlers=[profile_kwargs("runs/my-run")])

Each name is imported on first use, so that using one loop's integration never imports another
loop's package: ``transformers`` (with ``accelerate``, which its Trainer needs), ``pytorch_lightning``
or ``accelerate``, and PyTorch for all of them (``pip install 'tb-attn[transformers]'``, ``[lightning]``
or ``[accelerate]``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.capture import ProfilerBusyError, Schedule
    from runner.instrument import instrument
    from tb_attn.integrations.accelerate import profile_kwargs
    from tb_attn.integrations.hf import AttentionProfilerCallback
    from tb_attn.integrations.lightning import AttentionProfiler

__all__ = ["AttentionProfiler", "AttentionProfilerCallback", "ProfilerBusyError", "Schedule", "instrument",
           "profile_kwargs"]

#: name -> (module, the extra that installs what it needs)
_HOMES = {
    "AttentionProfilerCallback": ("tb_attn.integrations.hf", "transformers"),
    "AttentionProfiler": ("tb_attn.integrations.lightning", "lightning"),
    "profile_kwargs": ("tb_attn.integrations.accelerate", "accelerate"),
    "instrument": ("runner.instrument", "runner"),
    "Schedule": ("runner.capture", "runner"),
    "ProfilerBusyError": ("runner.capture", "runner"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, extra = home
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith(("tb_attn", "runner")):
            raise
        raise ImportError(f"tb_attn.integrations.{name} needs the {exc.name} package: "
                          f"pip install 'tb-attn[{extra}]'") from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
