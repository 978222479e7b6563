"""Numbers a trace claims are bounded by what it really holds: an out-of-range layer, head, head
range, step number, rank or shape is a diagnostic and is ignored, never an exception and never
work or output proportional to the number claimed.

Each case is a tiny hand-written trace: layer 0 carries the hostile value, layer 1 is legitimate
and must still be attributed. Summaries go through the JSON and msgpack encoders, as the routes
and the disk cache do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.common.bounds import MAX_DIAGNOSTICS, MAX_HEAD_ROWS
from tb_attn_plugin.analysis.cross_run.ranks import MAX_MAP_HEADS, ranks
from tb_attn_plugin.analysis.findings.findings import find
from tb_attn_plugin.analysis.measures import summary_figures
from tb_attn_plugin.analysis.ops.flops import MAX_TENSOR_BYTES, op_flops, tensor_bytes
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.engine.loader import Loader
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.scopes import MAX_HEADS, MAX_LAYERS

MAX_SUMMARY_BYTES = 1 << 20
SOFTMAX_DIMS = [[1, 4, 8, 8]]


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def _op(name: str, ts: float, dur: float, dims: list[Any], dtype: str = "float") -> dict[str, Any]:
    return _x(name, ts, dur, "cpu_op", **{"Input Dims": dims, "Input type": [dtype] * len(dims)})


def _trace(scope: str = "tbattn.v1/L0/softmax", *, dims: list[Any] = SOFTMAX_DIMS, op: str = "aten::softmax",
           extra: list[dict[str, Any]] | None = None, **top: Any) -> bytes:
    """Step 1 holding layer 0 (``scope`` around ``op`` of ``dims``) and a legitimate layer 1."""
    events = [_x("ProfilerStep#1", 0, 100), _x("tbattn.v1/L0", 1, 40), _x(scope, 2, 20), _op(op, 3, 10, dims),
              _x("tbattn.v1/L1", 50, 40), _x("tbattn.v1/L1/softmax", 51, 20),
              _op("aten::softmax", 52, 10, SOFTMAX_DIMS), *(extra or [])]
    return json.dumps({"traceEvents": events, **top}).encode()


def _summary(data: bytes, *, worker: str = "host", file: str = "host.1.pt.trace.json",
             max_bytes: int = MAX_SUMMARY_BYTES) -> WorkerSummary:
    analysis = analyze(decode_bytes(data))
    summary = summarize_analysis(analysis, file=file, worker=worker)
    summary = msgspec.structs.replace(summary, findings=find(analysis, summary))
    _check_encodes(summary, max_bytes)
    return summary


def _check_encodes(summary: WorkerSummary, max_bytes: int = MAX_SUMMARY_BYTES) -> None:
    size = len(msgspec.json.encode(summary))
    assert size < max_bytes, f"the summary is {size} bytes"
    msgspec.msgpack.encode(summary)  # the disk cache's format: ints must fit 64 bits


def _layer(summary: WorkerSummary, layer: int) -> Any:
    return next(x for x in summary.layers if x.layer == layer)


def _legit_layer_1(summary: WorkerSummary) -> None:
    layer = _layer(summary, 1)
    phases = {p.phase: p for p in layer.phases}
    assert set(phases) == {"softmax", "other"} and phases["softmax"].ops == ["aten::softmax"]
    assert layer.heads_count == 4 and [h.head for h in layer.heads] == [0, 1, 2, 3]
    assert summary.steps == [1]


def _diagnostic(summary: WorkerSummary, needle: str) -> int:
    hits = [n for k, n in summary.diagnostics.items() if needle in k]
    assert hits, f"no diagnostic about {needle!r} in {summary.diagnostics}"
    return sum(hits)


@pytest.fixture
def head_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the head rows the summary builds, failing fast past a bound: the count is the work."""
    built = [0]
    real = summary_figures.HeadStats

    def counting(**kwargs: Any) -> Any:
        built[0] += 1
        if built[0] > 4 * MAX_HEAD_ROWS:
            raise AssertionError("head rows are built in proportion to a claimed number")
        return real(**kwargs)

    monkeypatch.setattr(summary_figures, "HeadStats", counting)
    return built


@pytest.mark.parametrize("heads", ["H0-1000000", "H0-10000000000", f"H0-{MAX_HEADS}", "H4095-4096"])
def test_a_huge_head_range_is_ignored_without_building_its_rows(heads: str, head_rows: list[int]) -> None:
    summary = _summary(_trace(f"tbattn.v1/L0/{heads}/softmax"))
    assert _diagnostic(summary, "out of range") == 1
    assert head_rows[0] < 100
    layer = _layer(summary, 0)  # the block is still there; its softmax is in no phase within it
    assert [p.phase for p in layer.phases] == ["other"] and layer.phases[0].ops == ["aten::softmax"]
    assert [h.head for h in layer.heads] == [0, 1, 2, 3]  # from the softmax's shape, as without a range
    _legit_layer_1(summary)


def test_the_largest_head_range_in_bounds_is_kept(head_rows: list[int]) -> None:
    summary = _summary(_trace(f"tbattn.v1/L0/H0-{MAX_HEADS - 1}/softmax"))
    assert [h.head for h in _layer(summary, 0).heads] == list(range(MAX_HEADS))
    assert not any("out of range" in k for k in summary.diagnostics)
    _legit_layer_1(summary)


@pytest.mark.parametrize("scope", [
    "tbattn.v1/L2147483648/softmax", "tbattn.v1/L0/H2147483648/softmax", f"tbattn.v1/L{MAX_LAYERS}/softmax",
    "tbattn.v1/L0/H99999999999999999999/softmax", "tbattn.v1/L" + "9" * 1900 + "/softmax",
    "tbattn.v1/L0/H1-" + "9" * 1900 + "/softmax",
])
def test_a_layer_or_head_out_of_range_is_a_diagnostic(scope: str) -> None:
    summary = _summary(_trace(scope))
    assert _diagnostic(summary, "out of range") == 1
    assert {x.layer for x in summary.layers} == {0, 1}
    assert all(h.head < MAX_HEADS for x in summary.layers for h in x.heads)
    _legit_layer_1(summary)


@pytest.mark.parametrize("step", ["ProfilerStep#99999999999999999999", "ProfilerStep#2147483648",
                                  "ProfilerStep#" + "9" * 1900])
def test_a_step_number_out_of_range_is_a_diagnostic(step: str) -> None:
    summary = _summary(_trace(extra=[_x(step, 200, 10), _x("tbattn.v1/L1", 201, 5)]))
    assert _diagnostic(summary, "ProfilerStep") == 1
    _legit_layer_1(summary)


@pytest.mark.parametrize("name", ["tbattn.v1/L" + "9" * 5000 + "/softmax", "ProfilerStep#" + "9" * 5000])
def test_a_name_longer_than_the_limit_is_clipped_where_it_is_read(name: str) -> None:
    """Clipped to ``MAX_NAME_CHARS`` characters when decoded, the name is no scope or step (it
    ends in "…"), and the clipping is a diagnostic."""
    summary = _summary(_trace(extra=[_x(name, 200, 10), _x("tbattn.v1/L1", 201, 5)]))
    assert _diagnostic(summary, "characters (clipped)") == 1
    assert not any("out of range" in k or "ProfilerStep" in k for k in summary.diagnostics)
    _legit_layer_1(summary)


@pytest.mark.parametrize("info", [{"rank": 2**70, "world_size": 2**70}, {"rank": -1, "world_size": 0},
                                  {"rank": 2**63, "world_size": 2}])
def test_a_distributed_rank_out_of_range_is_a_diagnostic(info: dict[str, Any]) -> None:
    summary = _summary(_trace(distributedInfo=info))
    assert summary.rank is None
    assert summary.world_size is None or summary.world_size == 2
    _diagnostic(summary, "rank")
    _legit_layer_1(summary)


def test_a_rank_in_the_file_name_out_of_range_is_a_diagnostic(tmp_path: Path) -> None:
    name = "host_rank99999999999999999999999.1.pt.trace.json"
    path = tmp_path / name
    path.write_bytes(_trace())
    st = path.stat()
    trace = TraceFile(path=str(path), name=name, worker="host_rank99999999999999999999999", span="1",
                      size=st.st_size, mtime=st.st_mtime)
    summary = Loader(cache_dir=str(tmp_path / "cache")).summarize_file(trace)  # the disk cache encodes it
    assert summary.rank is None
    _diagnostic(summary, "rank")
    _check_encodes(summary)
    _legit_layer_1(summary)
    run = RunSummary(run="r", metadata=None, workers=[summary], errors=[])
    msgspec.json.encode(ranks(run))


def test_a_sane_rank_in_the_file_name_is_kept() -> None:
    assert _summary(_trace(), worker="host_rank3").rank == 3


@pytest.mark.parametrize("dims", [[[1, 1_000_000, 1, 1]], [[1, 10**15, 1, 1]], [[1, 2**53, 1, 1]]])
def test_a_head_count_from_shapes_beyond_max_heads_is_not_a_head_count(dims: list[Any], head_rows: list[int]) -> None:
    summary = _summary(_trace(dims=dims))
    layer = _layer(summary, 0)
    assert layer.heads_count is None and layer.heads == []
    assert head_rows[0] < 100
    _diagnostic(summary, "head count" if dims[0][1] * 4 <= MAX_TENSOR_BYTES else "PiB")
    _legit_layer_1(summary)


@pytest.mark.parametrize(("op", "dims"), [
    ("aten::softmax", [[2**53, 4, 8, 8]]),
    ("aten::softmax", [[2**53, 2**53, 4, 4]]),
    ("aten::bmm", [[2**53, 2**53, 2**53], [2**53, 2**53, 2**53]]),
    ("aten::mm", [[2**40, 2**40], [2**40, 2**40]]),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", [[2**53] * 4, [2**53] * 4, [2**53] * 4]),
    ("aten::matmul", [[2**53] * 64, [2**53] * 64]),
])
def test_a_tensor_claimed_over_a_pebibyte_is_not_believed(op: str, dims: list[Any]) -> None:
    summary = _summary(_trace(op=op, dims=dims))
    layer = _layer(summary, 0)
    assert layer.flops == 0.0 and layer.sxs_bytes == 0.0 and layer.heads_count is None
    _diagnostic(summary, "PiB")
    _legit_layer_1(summary)


def test_a_score_tensor_claimed_over_a_pebibyte_is_no_score_size() -> None:
    """Inputs of 4 MiB and 512 TiB are believable; the S×S scores they imply (2**67 elements) are not."""
    dims = [[1, 1, 2**20, 1], [1, 1, 2**47, 1], [1, 1, 2**47, 1]]
    summary = _summary(_trace(op="aten::_scaled_dot_product_flash_attention_for_cpu", dims=dims))
    layer = _layer(summary, 0)
    assert layer.sxs_bytes == 0.0 and layer.flops == 4.0 * 2**67
    _legit_layer_1(summary)


def test_flops_of_huge_shapes_never_overflow() -> None:
    huge = OpShapes(dims=([2**62, 2**62], [2**62, 2**62]), types=("float", "float"), concrete=())
    assert op_flops("aten::mm", huge) == 0.0
    assert tensor_bytes([2**62, 2**62], "float") > MAX_TENSOR_BYTES
    assert tensor_bytes([-1, 4], "float") is None
    big = OpShapes(dims=([2**20, 2**20], [2**20, 2**10]), types=("float", "float"), concrete=())
    assert op_flops("aten::mm", big) == 2.0 * 2**50


def test_head_rows_are_bounded_per_summary(head_rows: list[int]) -> None:
    """A few events, each naming a wide head range, cannot make the summary millions of rows."""
    layers = 2 * MAX_HEAD_ROWS // MAX_HEADS
    events = [_x("ProfilerStep#1", 0, 100 * layers + 100)]
    for k in range(layers):
        events += [_x(f"tbattn.v1/L{k}", 100 * k + 1, 50),
                   _x(f"tbattn.v1/L{k}/H0-{MAX_HEADS - 1}/softmax", 100 * k + 2, 20),
                   _op("aten::softmax", 100 * k + 3, 10, SOFTMAX_DIMS)]
    # A full summary's worth of head rows is about 113 bytes each: 1.9 MB at the bound.
    summary = _summary(json.dumps({"traceEvents": events}).encode(), max_bytes=MAX_HEAD_ROWS * 160)
    rows = sum(len(x.heads) for x in summary.layers)
    assert rows == MAX_HEAD_ROWS and len(summary.layers) == layers
    assert _diagnostic(summary, "head rows") == layers * MAX_HEADS - MAX_HEAD_ROWS
    assert head_rows[0] <= MAX_HEAD_ROWS


def test_the_ranks_view_bounds_its_head_map() -> None:
    """Three ranks, each with a full summary's worth of head rows in layers of its own."""
    per_rank = MAX_HEAD_ROWS // MAX_HEADS
    workers = []
    for rank in range(3):
        events = [_x("ProfilerStep#1", 0, 1000)]
        for k in range(rank * per_rank, (rank + 1) * per_rank):
            events += [_x(f"tbattn.v1/L{k}", 10 * k + 1, 5),
                       _x(f"tbattn.v1/L{k}/H0-{MAX_HEADS - 1}/softmax", 10 * k + 2, 2)]
        data = json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 3}}).encode()
        workers.append(summarize_analysis(analyze(decode_bytes(data)), file=f"w{rank}", worker=f"w{rank}"))
    assert all(sum(len(x.heads) for x in w.layers) == MAX_HEAD_ROWS for w in workers)
    view = ranks(RunSummary(run="r", metadata=None, workers=workers, errors=[]))
    assert len(view.heads) == MAX_MAP_HEADS < 3 * MAX_HEAD_ROWS
    assert any(f"{3 * MAX_HEAD_ROWS - MAX_MAP_HEADS} more" in w for w in view.warnings)


def test_diagnostics_copied_into_the_summary_are_bounded() -> None:
    extra = [_x("odd", 60 + k / 1000, 0.0001, cat=f"category-{k}-" + "x" * 2000) for k in range(500)]
    summary = _summary(_trace(extra=extra))
    assert len(summary.diagnostics) <= MAX_DIAGNOSTICS
    assert all(len(k) <= 200 for k in summary.diagnostics)
    _diagnostic(summary, "more kinds")
    _legit_layer_1(summary)


def test_long_names_are_clipped_in_the_summary() -> None:
    """One event with a long name is listed in several places (phase ops, findings): each is clipped."""
    long = "aten::" + "x" * 200_000
    summary = _summary(_trace(extra=[_x("tbattn.v1/L1 " + "m" * 200_000, 50, 40), _x(long, 80, 5, "cpu_op")]))
    text = msgspec.json.encode(summary)
    assert len(text) < 100_000
    _legit_layer_1(summary)


def test_collective_kinds_are_bounded() -> None:
    from tb_attn_plugin.analysis.attribution.collectives import MAX_KINDS

    extra = [_x(f"gloo:{'a' * (k % 26 + 1)}{chr(97 + k // 26 % 26)}{chr(97 + k // 676)}", 60 + k / 100, 0.001, tid=2)
             for k in range(3 * MAX_KINDS)]
    summary = _summary(_trace(extra=extra))
    assert len(summary.collectives) <= MAX_KINDS
    assert abs(sum(c.calls for c in summary.collectives) - 3 * MAX_KINDS) < 1e-6
    _diagnostic(summary, "collective")
    _legit_layer_1(summary)


def test_inferred_blocks_past_max_layers_are_dropped() -> None:
    """An unscoped trace with more SDPA calls in a step than layers can exist: the first are kept."""
    sdpa = "aten::_scaled_dot_product_flash_attention_for_cpu"
    n = MAX_LAYERS + 10
    events = [_x("ProfilerStep#1", 0, 10 * n + 10)] + [_x(sdpa, 10 * k + 1, 5, "cpu_op") for k in range(n)]
    # About 1.5 KB per layer (its sdpa phase, and other: the scopes' padding): the summary grows
    # with the trace's real content (4106 events).
    summary = _summary(json.dumps({"traceEvents": events}).encode(), max_bytes=8 * MAX_SUMMARY_BYTES)
    assert len(summary.layers) == MAX_LAYERS and summary.inferred
    assert _diagnostic(summary, "layers") == 10


def test_scopes_past_max_layers_are_dropped_not_the_trace() -> None:
    """5000 layers in a step: the first 4096 are analyzed, the other 904 block scopes counted."""
    events: list[dict[str, Any]] = []
    for k in range(MAX_LAYERS + 904):
        events += [_x(f"tbattn.v1/L{k}", 10 * k + 1, 5), _x("aten::softmax", 10 * k + 2, 2, "cpu_op")]
    events.append(_x("ProfilerStep#0", 0, 10 * len(events)))
    # About 1.3 KiB per layer: two phases each (the softmax, placed by its role, and other).
    summary = _summary(json.dumps({"traceEvents": events}).encode(), max_bytes=6 * MAX_SUMMARY_BYTES)
    assert [x.layer for x in summary.layers] == list(range(MAX_LAYERS))
    assert _diagnostic(summary, "out of range") == 904
