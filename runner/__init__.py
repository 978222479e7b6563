"""tb-attn runner: profile transformer attention with scopes per layer, head and phase.

``instrument(model)`` scopes the attention of models we did not write; ``python -m runner``
(``tb-attn-run``) profiles the built-in transformer and real models into a TensorBoard logdir.
"""

from runner.config import ConfigError, ModelConfig, ProfileConfig
from runner.instrument import Instrumentation, NoAttentionFoundWarning, instrument

__all__ = [
    "ConfigError",
    "Instrumentation",
    "ModelConfig",
    "NoAttentionFoundWarning",
    "ProfileConfig",
    "instrument",
]
