"""``finding.new_finding``: a finding's one constructor bounds its evidence and rounds its figures."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import tb_attn_plugin
from tb_attn_plugin.analysis.common.bounds import MAX_EVIDENCE_NAMES
from tb_attn_plugin.analysis.common.finding import new_finding

PACKAGE = Path(tb_attn_plugin.__file__).parent


def test_evidence_is_bounded_and_figures_rounded() -> None:
    names = [f"op{i}" for i in range(MAX_EVIDENCE_NAMES + 3)]
    f = new_finding("hidden-copy", "medium", "Title", "What the trace shows", "The change to make", layers=[0, 2],
                    ops=names, kernels=names[:2], time_us=12.34567, nbytes=4096,
                    details={"share": 0.123456789, "calls": np.int64(7), "ratio": np.float32(1.5), "op": "aten::copy_"})
    assert f.id == "hidden-copy" and f.severity == "medium"
    assert f.evidence.ops == names[:MAX_EVIDENCE_NAMES]
    assert f.evidence.kernels == ["op0", "op1"]
    assert f.evidence.layers == [0, 2]
    assert f.evidence.time_us == 12.346  # 3 decimals
    assert f.evidence.bytes == 4096.0 and isinstance(f.evidence.bytes, float)
    assert f.evidence.details == {"share": 0.1235, "calls": 7, "ratio": 1.5, "op": "aten::copy_"}
    assert type(f.evidence.details["calls"]) is int and type(f.evidence.details["ratio"]) is float


def test_no_other_module_builds_a_finding() -> None:
    """Every rule goes through ``new_finding``: no other module calls ``Finding(...)`` or ``Evidence(...)``."""
    building = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in {"Finding", "Evidence"}):
                building.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert building and all(b.startswith("analysis/common/finding.py:") for b in building), building
