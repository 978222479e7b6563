"""``docs/notebook.ipynb`` runs as committed: executed in a fresh kernel on this interpreter, it
raises nothing, and its outputs have the stored ones' structure (every DataFrame's columns, and
its rows where they do not depend on timings; printed text). Cells tagged ``varies`` hold timings:
only their columns are compared.

The stored outputs change only on request: ``TB_ATTN_REGEN_GOLDEN=1`` writes this run's outputs
into the notebook (then read the diff).
"""

from __future__ import annotations

import json
import os
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
REGEN = os.environ.get("TB_ATTN_REGEN_GOLDEN") == "1"


class _Frame(HTMLParser):
    """A DataFrame's HTML: its header rows and each body row's labels (``th`` cells)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.head: list[list[str]] = []
        self.rows: list[list[str]] = []
        self._part = ""
        self._cell: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("thead", "tbody"):
            self._part = tag
        elif tag == "tr":
            (self.head if self._part == "thead" else self.rows).append([])
        elif tag == "th":
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "th" and self._cell is not None:
            (self.head if self._part == "thead" else self.rows)[-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data


def _kernelspec(tmp: Path) -> str:
    """A kernel on this interpreter, with this checkout first on the path, whatever kernels Jupyter
    has installed: its spec in ``tmp/kernels`` (found through ``JUPYTER_PATH``). Its name."""
    spec = tmp / "kernels" / "tb-attn-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tb-attn tests", "language": "python",
        "env": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "OMP_NUM_THREADS": "1"}}))
    return spec.name


def _frames(cell: Any) -> list[_Frame]:
    return [_Frame(o["data"]["text/html"]) for o in cell.outputs
            if o.output_type == "execute_result" and "dataframe" in o.get("data", {}).get("text/html", "")]


def _stdout(cell: Any) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """(the stored notebook, the same notebook executed now)."""
    stored = nbformat.read(str(NOTEBOOK), as_version=4)
    fresh = nbformat.read(str(NOTEBOOK), as_version=4)
    tmp = tmp_path_factory.mktemp("notebook")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(tmp))
        # The client owns the kernel it starts: it shuts it down and closes its sockets.
        nbclient.NotebookClient(fresh, kernel_name=_kernelspec(tmp), timeout=240, record_timing=False,
                                resources={"metadata": {"path": str(tmp)}}).execute()
    if REGEN:
        nbformat.validate(fresh)
        nbformat.write(fresh, str(NOTEBOOK))
        return fresh, fresh
    return stored, fresh


@pytest.mark.slow
def test_the_notebook_runs_without_errors(executed: tuple[Any, Any]) -> None:
    _, fresh = executed
    code = [c for c in fresh.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, "\n".join(f"{o.ename}: {o.evalue}" for o in errors)


@pytest.mark.slow
def test_its_outputs_have_the_stored_structure(executed: tuple[Any, Any]) -> None:
    stored, fresh = executed
    assert [c.source for c in stored.cells] == [c.source for c in fresh.cells]
    pairs = [(s, f) for s, f in zip(stored.cells, fresh.cells, strict=True) if s.cell_type == "code"]
    assert all(s.outputs for s, _ in pairs), "run with TB_ATTN_REGEN_GOLDEN=1 to store the outputs"
    compared = 0
    for s, f in pairs:
        varies = "varies" in s.metadata.get("tags", [])
        old, new = _frames(s), _frames(f)
        assert [x.head for x in old] == [x.head for x in new], s.source
        if not varies:
            assert [x.rows for x in old] == [x.rows for x in new], s.source
            assert _stdout(s) == _stdout(f), s.source
            compared += 1
    assert compared >= 5


@pytest.mark.slow
def test_its_key_outputs(executed: tuple[Any, Any]) -> None:
    _, fresh = executed
    code = [c for c in fresh.cells if c.cell_type == "code"]
    overview = next(o for o in code[1].outputs if o.output_type == "execute_result")["data"]["text/html"]
    assert "2 runs, 2 worker traces" in overview and "Findings (" in overview
    assert "The S×S attention scores are materialized" in overview  # naive attention's
    phases, columns = _frames(code[2])[0], _stdout(code[3])
    assert phases.head[0][1:4] == ["run", "layer", "phase"] and len(phases.rows) == 8
    assert columns.startswith("24 rows: run, worker, span, layer, phase, calls, cpu_us")  # 2 runs x 2 layers
    assert "backward_cpu_us" in columns and "roof_verdict" in columns
    per_phase = _frames(code[4])[0]
    assert [r[0] for r in per_phase.rows] == ["qkv_proj", "qk_matmul", "scale", "mask", "softmax", "av_matmul",
                                              "out_proj", "other", "sdpa"]
    layers = _frames(code[5])[0]
    assert len(layers.rows) == 4 and layers.head[0][1:4] == ["run", "layer", "backend"]
    findings = _frames(code[6])[0]
    assert findings.head[0][1:] == ["run", "id", "severity", "title", "time_us"]
    assert "fused SDPA backend" in _stdout(code[7])
    live = _frames(code[8])[0]
    assert len(live.rows) == 2 and live.head[0][1:] == ["layer", "module", "backend", "cpu_us", "flops"]
