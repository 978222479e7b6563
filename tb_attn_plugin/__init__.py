"""tb-attn: attention-aware analysis of torch.profiler traces, and its TensorBoard plugin.

Kept import-light on purpose: TensorBoard imports this package while loading plugins, and an
import error here would take the whole server down.
"""

__version__ = "0.1.0"
