"""One pure function gives a trace file's summary with its findings; the loader stores just that."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from tb_attn_plugin.analysis.attribution.analyze import _merged_order, analyze
from tb_attn_plugin.analysis.findings.findings import find
from tb_attn_plugin.analysis.measures.overview import headline
from tb_attn_plugin.analysis.measures.peaks import peaks_for
from tb_attn_plugin.analysis.measures.roofline import far_from_roof, with_roofline
from tb_attn_plugin.analysis.summary import summarize_analysis, summarize_trace
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import finding_order

META: dict[str, object] = {"impl": "sdpa-flash", "dtype": "bfloat16"}


def test_summarize_trace_is_the_summary_with_its_findings(trace_bytes: Callable[[str], bytes]) -> None:
    analysis = analyze(decode_bytes(trace_bytes("findings_cpu_mixed")))
    summary = summarize_trace(analysis, file="f", worker="w", span="1", metadata=META)
    plain = summarize_analysis(analysis, file="f", worker="w", span="1")
    roofed = with_roofline(plain, peaks_for(plain.device, analysis.events.meta.device_properties, META))
    # The roofline (no peak known for a CPU trace without the runner's probes) adds its finding.
    found = sorted(find(analysis, plain, metadata=META) + far_from_roof(roofed), key=finding_order)
    whole = msgspec.structs.replace(roofed, findings=found)
    assert whole.roofline is not None and whole.roofline.note and plain.roofline is None
    assert summary.findings and summary.findings == whole.findings
    assert summary.headline and summary.headline == headline(whole)  # the headline reads the findings
    assert summary == msgspec.structs.replace(whole, headline=headline(whole))


def test_the_loader_summarizes_a_file_with_summarize_trace(tmp_path: Path,
                                                          trace_bytes: Callable[[str], bytes]) -> None:
    (tmp_path / "w.1.pt.trace.json").write_bytes(trace_bytes("findings_cpu_mixed"))
    (run,) = resolve_runs(str(tmp_path))
    (trace,) = run.files
    loaded = Loader().summarize_file(trace, metadata=META)
    analysis = analyze(decode_bytes(trace_bytes("findings_cpu_mixed")))
    assert loaded == summarize_trace(analysis, file=trace.name, worker="w", span="1", metadata=META)


def test_added_annotations_merge_in_the_order_a_full_sort_gives() -> None:
    """``with_annotations`` merges new rows into the sorted events instead of sorting all of
    them again: the result must be the stable lexsort of the concatenation, ties included."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, k = int(rng.integers(1, 60)), int(rng.integers(1, 20))
        rows = [{"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": int(rng.integers(1, 4)),
                 "ts": float(rng.integers(0, 10)), "dur": float(rng.integers(0, 4))} for _ in range(n)]
        events = decode_bytes(json.dumps({"traceEvents": rows}).encode())
        track = rng.integers(0, len(events.tracks) + 1, k).astype(np.int32)
        ts = rng.integers(0, 10, k).astype(np.float64) + (events.ts.min() if len(events) else 0)
        dur = rng.integers(0, 4, k).astype(np.float64)
        want = np.lexsort((-np.concatenate([events.dur, dur]), np.concatenate([events.ts, ts]),
                           np.concatenate([events.track, track])))
        assert np.array_equal(_merged_order(events, track, ts, dur), want)
