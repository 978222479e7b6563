"""Property-based: whatever a writer of the summary cache puts in an entry, reading it never
raises, never yields a summary past a bound a fresh one keeps (``bounds.out_of_bounds``, and
``MAX_SUMMARY_BYTES`` encoded), and an entry refused is a miss (the loader parses the trace).

Entries: random bytes, our header over random bytes, a good summary's bytes mutated under a
forged (valid) digest, and good summaries grown around each bound or given values of the wrong
type, also under a forged digest. The examples are derandomized, as in ``plugin/test_fuzz.py``
(a few seconds); ``TB_ATTN_FUZZ_EXAMPLES`` runs more.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from helpers import HAND_TRACES
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tb_attn_plugin.analysis.common import bounds
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.summary_cache import SummaryCache
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.scopes import PHASES

EXAMPLES = int(os.environ.get("TB_ATTN_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize="TB_ATTN_FUZZ_SEED" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MAGIC = b"tb-attn-summary/1\n"
TRACE = TraceFile("/logdir/run/host_1.1.pt.trace.json", "host_1.1.pt.trace.json", "host_1", "1", 5212, 1.5)


@functools.cache
def _base() -> dict[str, Any]:
    """A real summary with layers, phases, head rows and findings, as msgpack builtins."""
    (run,) = resolve_runs(str(HAND_TRACES / "findings_cpu_mixed.json"))
    summary = Loader().summarize_file(run.files[0])
    assert summary.layers and summary.findings and summary.layers[0].heads
    out: dict[str, Any] = msgspec.to_builtins(summary)
    return out


def _forge(payload: bytes) -> bytes:
    return MAGIC + hashlib.sha256(payload).digest() + payload


def _around(bound: int) -> st.SearchStrategy[int]:
    return st.sampled_from([bound - 1, bound, bound + 1])


Grow = Callable[[dict[str, Any]], None]


def _set(path: tuple[Any, ...], value: Any) -> Grow:
    def grow(d: dict[str, Any]) -> None:
        target: Any = d
        try:
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = copy.deepcopy(value)  # never an alias of the base summary's rows
        except (LookupError, TypeError):
            pass  # an earlier change took the path away
    return grow


def _n_of(path: tuple[Any, ...], bound: int, item: Callable[[int], Any]) -> st.SearchStrategy[Grow]:
    return _around(bound).map(lambda n: _set(path, [item(i) for i in range(n)]))


def _text(path: tuple[Any, ...], bound: int) -> st.SearchStrategy[Grow]:
    return _around(bound).map(lambda n: _set(path, "x" * n))


@functools.cache
def _bare_layer() -> dict[str, Any]:
    return {**_base()["layers"][0], "phases": [], "heads": []}


wrong_type = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=8),
                       st.binary(max_size=8), st.lists(st.integers(0, 3), max_size=3),
                       st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=3))
field = st.sampled_from(["steps", "layers", "diagnostics", "notes", "findings", "collectives", "headline", "file",
                         "step_count", "roofline", "generation", "spread", "schema", "per_step"])
grow = st.one_of(
    _n_of(("steps",), bounds.MAX_STEPS, lambda i: i),
    _n_of(("layers",), bounds.MAX_LAYERS, lambda i: _bare_layer()),  # the same object each time: msgpack
    # writes each occurrence
    _n_of(("layers", 0, "heads"), bounds.MAX_HEAD_ROWS, lambda i: _base()["layers"][0]["heads"][0]),
    _n_of(("layers", 0, "phases"), len(PHASES) + 1, lambda i: _base()["layers"][0]["phases"][0]),
    _n_of(("layers", 0, "phases", 0, "kernel_names"), bounds.MAX_PHASE_NAMES, lambda i: f"kernel{i}"),
    _text(("layers", 0, "phases", 0, "ops", 0), bounds.MAX_NAME_CHARS),
    _text(("layers", 0, "module"), bounds.MAX_NAME_CHARS),
    _around(bounds.MAX_DIAGNOSTICS).map(lambda n: _set(("diagnostics",), {f"kind {i}": i for i in range(n)})),
    _around(bounds.MAX_LABEL_CHARS).map(lambda n: _set(("diagnostics",), {"d" * n: 1})),
    _n_of(("collectives",), bounds.MAX_COLLECTIVE_KINDS,
          lambda i: {"name": f"c{i}", "calls": 1.0, "cpu_us": 1.0, "device_us": 0.0}),
    _n_of(("findings",), bounds.MAX_ITEMS, lambda i: _base()["findings"][0]),
    _n_of(("findings", 0, "evidence", "ops"), bounds.MAX_EVIDENCE_NAMES, lambda i: f"aten::op{i}"),
    _n_of(("notes",), bounds.MAX_ITEMS, lambda i: "a note"),
    _text(("headline",), bounds.MAX_TEXT_CHARS),
    st.sampled_from([1, 3]).map(lambda n: _set(("notes",), ["n" * (3 << 20)] * n)),  # over the byte bound, or not
    st.tuples(field, wrong_type).map(lambda kv: _set((kv[0],), kv[1])),
    st.tuples(st.sampled_from(["cpu_us", "heads", "phases", "spread", "layer"]), wrong_type)
      .map(lambda kv: _set(("layers", 0, kv[0]), kv[1])),
)


@st.composite
def grown(draw: st.DrawFn) -> bytes:
    d = copy.deepcopy(_base())
    for change in draw(st.lists(grow, min_size=1, max_size=3)):
        change(d)
    return _forge(msgspec.msgpack.encode(d))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    payload = bytearray(msgspec.msgpack.encode(_base()))
    for at, value in draw(st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)), max_size=8)):
        payload[at] = value
    cut = draw(st.integers(0, len(payload)))
    forged = _forge(bytes(payload[:cut]))
    return forged if draw(st.booleans()) else forged[:-1] + bytes([forged[-1] ^ 1])  # else a damaged digest


#: Half of them grown summaries, the other half junk and mutations.
entries = st.one_of(st.one_of(st.binary(max_size=512), st.binary(max_size=512).map(lambda b: MAGIC + b),
                              st.binary(max_size=512).map(_forge), mutated()), grown())


def _expected(raw: bytes) -> WorkerSummary | None:
    """What a reader may serve of ``raw``: a summary under a valid digest, within every bound."""
    head = len(MAGIC) + 32
    payload = raw[head:]
    if not raw.startswith(MAGIC) or len(raw) < head or hashlib.sha256(payload).digest() != raw[len(MAGIC):head]:
        event("refused: damaged")
        return None
    if len(payload) > bounds.MAX_SUMMARY_BYTES:
        event("refused: over the byte bound")
        return None
    try:
        summary = msgspec.msgpack.decode(payload, type=WorkerSummary)
    except (msgspec.DecodeError, msgspec.ValidationError):
        event("refused: not a summary")
        return None
    why = bounds.out_of_bounds(summary)
    event("served" if why is None else f"refused: {why.split(':')[0]}")
    return summary if why is None else None


@FUZZ
@given(raw=entries)
def test_an_entry_is_served_only_within_the_bounds(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        cache = SummaryCache(root)
        path = Path(cache._path(cache.key(TRACE)))
        path.parent.mkdir(parents=True)
        path.write_bytes(raw)
        payload = cache.get(TRACE)
        summary = None if payload is None else cache.decode(payload)
        expected = _expected(raw)
        assert summary == expected
        if summary is not None:
            assert payload is not None and len(payload) <= bounds.MAX_SUMMARY_BYTES
            assert bounds.out_of_bounds(summary) is None
        loader = Loader(cache_dir=root)
        found = loader.from_summary_cache([TRACE])
        assert found == ({} if expected is None else {TRACE: expected})
        if expected is None:  # a miss: nothing kept (the pipeline's parse that follows asks no cache)
            assert loader.cached(TRACE) is None
