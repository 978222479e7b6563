"""Property-based: hostile traces under hostile names, through every route and the CLI.

Hypothesis builds a Kineto-like trace from a grammar of what a trace can claim (scope names with
huge layers, heads and ranges, step numbers, ranks, shapes, sizes, times of any magnitude,
fields of the wrong type, lone surrogate escapes, control characters) and then damages its text
(truncation, filler, garbage). It stores the trace under a hostile run and file name beside a
good run. Properties:

- every route answers 200, 202 or a 4xx, never a 500, within a time bound; a 200 is JSON (or
  the trace's bytes) and its body is bounded (no allocation by a claimed number);
- no failure is an "internal error" (an exception that only the loader's last resort caught);
- the good run is still summarized and compared;
- the CLI exits 0, 1 or 2, with one ``tb-attn:`` line per error and no traceback;
- memory stays bounded over the whole run.

The examples (400 per property) are derandomized, so CI runs the same ones every time (under a minute);
``TB_ATTN_FUZZ_EXAMPLES=500`` explores more, with fresh randomness when ``TB_ATTN_FUZZ_SEED``
is set to anything.
"""

from __future__ import annotations

import io as stdio
import json
import os
import resource
import shutil
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any
from urllib.parse import quote

from helpers import HAND_TRACES
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from webtools import BASE, get, plugin_client

from tb_attn_plugin.cli import main as cli
from tb_attn_plugin.vocab.scopes import PHASES

EXAMPLES = int(os.environ.get("TB_ATTN_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize="TB_ATTN_FUZZ_SEED" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
GOOD = HAND_TRACES / "steps.json"
ROUTE_BOUND_S = 30.0
BODY_BOUND = 4 << 20  # a summary at its head-row bound is about 1.9 MB
SURROGATE = "@@lone@@"  # replaced by a JSON escape of a lone surrogate in the text

huge = st.one_of(st.integers(0, 40), st.sampled_from([2**31 - 1, 2**31, 2**32, 2**53, 2**63, 2**64, 2**70, 10**20]),
                 st.integers(0, 2**80))
number = st.one_of(huge, st.integers(-(2**70), 0), st.floats(allow_nan=False, allow_infinity=False),
                   st.floats(min_value=0, max_value=1e4))
weird = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2),
                  st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
hostile_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\x1b[2J", "\x1b]0;pwned\x07", "\u202eevil", "a\nb", "\x00", SURROGATE, f"x{SURROGATE}y"]),
)
phase = st.sampled_from([*PHASES, "bogus", ""])
scope_name = st.one_of(
    st.builds("tbattn.v1/L{}/{}".format, huge, phase),
    st.builds("tbattn.v1/L{}/H{}/{}".format, huge, huge, phase),
    st.builds("tbattn.v1/L{}/H{}-{}/{}".format, huge, huge, huge, phase),
    st.builds("tbattn.v{}/L{} {}".format, huge, huge, hostile_text),
)
op_name = st.sampled_from([
    "aten::softmax", "aten::_safe_softmax", "aten::bmm", "aten::matmul", "aten::mul", "aten::div", "aten::linear",
    "aten::masked_fill", "aten::where", "aten::cat", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
    "aten::dropout", "aten::copy_", "aten::empty", "nccl:all_reduce", "c10d::allreduce_", "gloo:all_reduce",
    "autograd::engine::evaluate_function: SoftmaxBackward0", "Optimizer.step#SGD.step",
])
name = st.one_of(op_name, scope_name, st.builds("ProfilerStep#{}".format, st.one_of(huge, hostile_text)),
                 hostile_text, st.just("[memory]"))
dims = st.lists(st.lists(st.one_of(st.integers(0, 64), huge, st.integers(-5, -1)), max_size=5), max_size=4)
args = st.fixed_dictionaries({}, optional={
    "Input Dims": st.one_of(dims, weird),
    "Input type": st.lists(st.sampled_from(["float", "c10::Half", ""]), max_size=3),
    "External id": st.one_of(huge, weird), "Record function id": huge, "Sequence number": st.one_of(huge, weird),
    "Fwd thread id": huge, "correlation": st.one_of(huge, weird), "Bytes": number, "Total Allocated": number,
    "Total Reserved": number, "Device Type": st.one_of(st.integers(-2, 3), huge), "Device Id": st.one_of(huge, weird),
    "Addr": number, "stream": st.one_of(huge, weird),
})
trace_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "X", "i", "s", "f", "B", "E", "M"]),
     "cat": st.sampled_from(["cpu_op", "cpu_op", "user_annotation", "kernel", "Kernel", "cuda_runtime", "gpu_memcpy",
                             "gpu_user_annotation", "Trace", "python_function", "fwdbwd", "cpu_instant_event"]),
     "name": name,
     "ts": st.one_of(st.integers(0, 200), number),
     "dur": st.one_of(st.integers(0, 200), number)},
    optional={"pid": st.one_of(st.integers(0, 3), huge, hostile_text), "tid": st.one_of(st.integers(0, 3), huge, weird),
              "args": st.one_of(args, weird), "id": huge},
)
top = st.fixed_dictionaries(
    {"schemaVersion": st.one_of(st.just(1), weird), "traceEvents": st.lists(trace_event, max_size=30)},
    optional={"distributedInfo": st.fixed_dictionaries({}, optional={"rank": st.one_of(huge, weird),
                                                                      "world_size": st.one_of(huge, weird),
                                                                      "backend": hostile_text}),
              "deviceProperties": st.lists(st.fixed_dictionaries({"id": huge, "name": hostile_text}), max_size=2),
              "baseTimeNanoseconds": number},
)
damage = st.one_of(
    st.just(("none", 0)), st.just(("none", 0)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("filler"), st.integers(1, 200_000)),
    st.tuples(st.just("garbage"), st.floats(0, 1)),
)
# Hidden names (a leading dot) are never runs, and a comma separates the names of runs=: neither
# is generated (a run whose name holds a comma cannot be compared; docs/limits.md).
run_name = st.one_of(st.sampled_from([b"hostile", b"r\xff\xfeun", b"\x1b[2Jrun", b"a\\b", b"sp ace",
                                      b"\xc3\xbcn\xc3\xaf", b"deep/er/run", b"a..b"]),
                     st.binary(min_size=1, max_size=8)
                     .filter(lambda b: not set(b) & set(b"/\x00,") and not b.startswith(b".")))
worker = st.sampled_from([b"host", b"host_rank99999999999999999999999", b"w\xff", b"\x1b]0;x\x07", b"rank-1"])


def _text(doc: dict[str, Any], kineto_layout: bool, how: tuple[str, float]) -> bytes:
    # Kineto's layout (one event per "  {" line) takes the chunked path, anything else the fallback.
    text = json.dumps(doc, indent=2 if kineto_layout else None, allow_nan=False)
    text = text.replace(SURROGATE, "\\ud800")
    data = text.encode("utf-8", "surrogatepass")
    kind, amount = how
    if kind == "truncate":
        return data[: int(len(data) * amount)]
    if kind == "filler":
        cut = data.find(b"},") + 2 if b"}," in data else len(data) // 2
        return data[:cut] + b" \n\t" * int(amount) + data[cut:]
    if kind == "garbage":
        at = int(len(data) * amount)
        return data[:at] + b"\x00\xff{[\"" + data[at:]
    return data


def _write_logdir(root: Path, run: bytes, file: bytes, data: bytes) -> None:
    base = os.fsencode(root)
    os.makedirs(base + b"/" + run, exist_ok=True)
    with open(base + b"/" + run + b"/" + file + b".1.pt.trace.json", "wb") as f:
        f.write(data)
    os.makedirs(root / "good")
    shutil.copy(GOOD, root / "good" / "good.1.pt.trace.json")


def _check_route(client: Any, url: str) -> Any:
    started = time.monotonic()
    response = get(client, url, timeout_s=ROUTE_BOUND_S)
    assert time.monotonic() - started < ROUTE_BOUND_S
    assert response.status_code in (200, 400, 404), (url, response.status_code, response.get_data()[:300])
    body = response.get_data()
    response.close()
    assert len(body) < BODY_BOUND, (url, len(body))
    if response.status_code == 200 and response.mimetype == "application/json":
        value = json.loads(body)
        assert "internal error" not in body.decode("utf-8", "replace"), (url, body[:600])
        return value
    return None


@FUZZ
@given(doc=top, kineto_layout=st.booleans(), how=damage, run=run_name, file=worker)
def test_every_route_answers_any_trace_under_any_name(doc: dict[str, Any], kineto_layout: bool,
                                                     how: tuple[str, float], run: bytes, file: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = _text(doc, kineto_layout, how)
        _write_logdir(root, run, file, data)
        client = plugin_client(root, wait_s=0.2)
        runs = _check_route(client, f"{BASE}/runs")
        names = [r["run"] for r in runs["runs"]]
        assert "good" in names and len(names) == 2, names
        (hostile,) = [n for n in names if n != "good"]
        r = quote(hostile)
        _check_route(client, f"{BASE}/metadata?run={r}")
        summary = _check_route(client, f"{BASE}/summary?run={r}")
        # What the examples reach (pytest --hypothesis-show-statistics): parsed traces with and
        # without attention, and refused ones.
        layers = any(w.get("layers") for w in summary["workers"])
        event("summarized, with layers" if layers else "summarized" if summary["workers"] else "refused")
        for route in ("drilldown?layer=0&run=", "memory?run=", "timeline?run=", "ranks?run="):
            _check_route(client, f"{BASE}/{route}{r}")
        for layer in {w["layers"][0]["layer"] for w in summary["workers"] if w.get("layers")}:
            _check_route(client, f"{BASE}/drilldown?run={r}&layer={layer}&phase=softmax")
        compare = _check_route(client, f"{BASE}/compare?runs={r},good")
        assert "good" in [x["run"] for x in compare["runs"]]
        _check_route(client, f"{BASE}/scaling?runs={r},good")
        (entry,) = [x for x in runs["runs"] if x["run"] == hostile]
        trace_file = entry["workers"][0]["spans"][0]["file"]
        download = get(client, f"{BASE}/trace?run={r}&file={quote(trace_file)}")
        assert download.status_code == 200 and download.get_data() == data
        download.close()


@FUZZ
@given(doc=top, kineto_layout=st.booleans(), how=damage, run=run_name, file=worker,
       command=st.sampled_from(["summarize", "summarize-json", "summarize-csv", "compare", "ranks", "gate"]))
def test_the_cli_exits_0_1_or_2_with_one_line_per_error(doc: dict[str, Any], kineto_layout: bool,
                                                        how: tuple[str, float], run: bytes, file: bytes,
                                                        command: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_logdir(root, run, file, _text(doc, kineto_layout, how))
        hostile_dir = os.fsdecode(os.fsencode(root) + b"/" + run)
        argv = {
            "summarize": ["summarize", str(root)], "summarize-json": ["summarize", str(root), "--format", "json"],
            "summarize-csv": ["summarize", str(root), "--format", "csv"], "compare": ["compare", str(root)],
            "ranks": ["ranks", str(root)], "gate": ["gate", "--baseline", str(root / "good"), "--candidate",
                                                    hostile_dir],
        }[command]
        out, err = stdio.StringIO(), stdio.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(argv)
        assert code in (0, 1, 2), code
        errors = err.getvalue().splitlines()
        assert all(line.startswith("tb-attn: ") for line in errors), errors
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), errors
        assert not any(c in out.getvalue() for c in "\x1b\x07\u202e"), out.getvalue()[:500]
        if command == "summarize-json":
            json.loads(out.getvalue())


def test_memory_stays_bounded_over_the_fuzzing() -> None:
    """Runs last in this module (pytest keeps file order): the peak RSS of the whole process after
    both fuzz tests, against a bound far below what one claimed size would have allocated."""
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mib < 3000, peak_mib
