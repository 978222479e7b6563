"""tb-attn runner: profile transformer attention with scopes per layer, head and phase.

``instrument(model)`` scopes the attention of models we did not write; ``python -m runner``
(``tb-attn-run``) profiles the built-in transformer and real models into a TensorBoard logdir.
"""

from typing import NoReturn

from runner.config import ConfigError, ModelConfig, ProfileConfig

try:
    from runner.instrument import Instrumentation, NoAttentionFoundWarning, instrument
except ModuleNotFoundError as _exc:
    # Without torch (a base install: the tab and `tb-attn` only) `import runner` must still
    # work, so that `tb-attn-run` can say which extra to install instead of a traceback.
    if _exc.name != "torch":
        raise
    _NO_TORCH = _exc

    def __getattr__(name: str) -> NoReturn:
        if name in ("Instrumentation", "NoAttentionFoundWarning", "instrument"):
            raise ImportError(f"runner.{name} needs PyTorch: pip install 'tb-attn[runner]'") from _NO_TORCH
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ConfigError",
    "Instrumentation",
    "ModelConfig",
    "NoAttentionFoundWarning",
    "ProfileConfig",
    "instrument",
]
