"""``/drilldown`` through TensorBoard's WSGI app: the tree of call paths with its links, kernels
under the op that launched them, and the link to the PyTorch Profiler tab in that tab's names."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import SHARED_TRACES
from webtools import BASE, get, get_json, plugin_client

MODEL_TRACES = Path(__file__).resolve().parents[1] / "models" / "traces"
H100 = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"
PROFILER = importlib.util.find_spec("torch_tb_profiler") is not None


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runner run under exp/naive, and at the logdir itself two spans of a real H100 trace."""
    root = tmp_path_factory.mktemp("drill") / "team-logs"
    (naive,) = MODEL_TRACES.glob("builtin-naive-infer/**/*.pt.trace.json.gz")
    (root / "exp" / "naive").mkdir(parents=True)
    shutil.copy(naive, root / "exp" / "naive" / naive.name)
    for span in ("1796341427976271400", "1796341427976271408"):
        shutil.copy(H100, root / f"gpu.{span}.pt.trace.json.gz")
    return root


def _node(tree: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(n for n in tree if n["name"] == name)


def test_the_tree_links_parents_and_children(logdir: Path) -> None:
    drill = get_json(plugin_client(logdir), f"{BASE}/drilldown?run=exp/naive&layer=0&phase=qk_matmul")
    assert drill["schema"] == "tb-attn.drilldown/2" and drill["step_count"] >= 1
    tree = drill["tree"]
    assert tree and not drill["tree_truncated"] and drill["tree_nodes"] == len(tree)
    for node in tree:
        for c in node["children"]:
            assert tree[c]["parent"] == node["id"]
    # q @ kᵀ is one matmul per step, whose bmm (with the shapes of q and kᵀ split into heads) runs inside it
    matmul = _node(tree, "aten::matmul")
    assert matmul["parent"] is None and matmul["calls"] == 1.0 and len(matmul["input_dims"]) == 2
    bmm = _node(tree, "aten::bmm")
    assert bmm["parent"] == matmul["id"] and bmm["id"] in matmul["children"] and bmm["depth"] == 1
    assert bmm["input_types"] == ["float", "float"] and bmm["alloc_bytes"] > 0
    assert matmul["alloc_bytes"] >= bmm["alloc_bytes"] and matmul["cpu_us"] >= bmm["cpu_us"]
    assert drill["ops"][0]["name"] == "aten::matmul"  # the flat list by name is still there


def test_kernels_hang_under_their_op_and_the_link_names_the_span(logdir: Path) -> None:
    client = plugin_client(logdir)
    runs = get_json(client, f"{BASE}/runs")["runs"]
    assert [r["run"] for r in runs] == [".", "exp/naive"]
    drill = get_json(client, f"{BASE}/drilldown?run=.&worker=gpu&span=1796341427976271408&layer=0&phase=sdpa")
    tree = drill["tree"]
    (kernel,) = [n for n in tree if n["kind"] == "kernel"]
    assert "flash_fwd_kernel" in kernel["name"] and kernel["children"] == []
    launcher = tree[kernel["parent"]]
    assert launcher["name"] == "aten::_flash_attention_forward" and launcher["device_us"] == kernel["device_us"] > 0
    assert drill["trace_file"] == "gpu.1796341427976271408.pt.trace.json.gz"
    if PROFILER:
        # The tab names the run at the logdir by the directory's name, and spans 1, 2 by file order.
        assert drill["profiler"] == {"plugin": "pytorch_profiler", "run": "team-logs", "worker": "gpu", "span": "2",
                                     "span_count": 2}
    else:
        assert drill["profiler"] is None


@pytest.mark.parametrize(("query", "status"), [
    ("run=exp/naive&layer=-1", 400), ("run=exp/naive&layer=7", 404), ("run=exp/naive&layer=0&phase=nope", 404),
    ("run=.&worker=gpu&span=9&layer=0", 404)])
def test_bad_arguments(logdir: Path, query: str, status: int) -> None:
    response = get(plugin_client(logdir), f"{BASE}/drilldown?{query}")
    assert response.status_code == status
    text = response.get_data(as_text=True)
    assert len(text.strip().splitlines()) == 1 and "Traceback" not in text
