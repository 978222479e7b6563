"""A finding's one constructor, for every rule: ``new_finding`` bounds its evidence and rounds its
figures, so that the rules of ``findings/``, ``measures/`` and ``cross_run/`` make findings alike.

A finding's types (``Finding``, ``Evidence``), its severities (``SEVERITIES``) and the order
findings are listed in everywhere (``finding_order``) are the summary's schema: they live in
``types/schema.py``.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.common.bounds import MAX_EVIDENCE_NAMES as MAX_NAMES
from tb_attn_plugin.types.schema import Evidence, Finding

__all__ = ["new_finding"]


def new_finding(fid: str, severity: str, title: str, explanation: str, suggestion: str, *, layers: list[int],
                ops: list[str], kernels: list[str], time_us: float, nbytes: float = 0.0,
                details: dict[str, float | int | str]) -> Finding:
    """A finding with its evidence bounded (``MAX_NAMES`` names) and its figures rounded."""
    rounded = {k: v if isinstance(v, str) else round(float(v), 4) if isinstance(v, float | np.floating) else int(v)
               for k, v in details.items()}
    return Finding(id=fid, severity=severity, title=title, explanation=explanation, suggestion=suggestion,
                   evidence=Evidence(layers=layers, ops=ops[:MAX_NAMES], kernels=kernels[:MAX_NAMES],
                                     time_us=round(time_us, 3), bytes=float(nbytes), details=rounded))
