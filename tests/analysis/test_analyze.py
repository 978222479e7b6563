"""One pure function gives a trace file's summary with its findings; the loader stores just that."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tb_attn_plugin.analysis.analyze import analyze
from tb_attn_plugin.analysis.findings import find
from tb_attn_plugin.analysis.overview import headline
from tb_attn_plugin.analysis.summary import summarize_analysis, summarize_trace
from tb_attn_plugin.loader import Loader, resolve_runs
from tb_attn_plugin.trace.decode import decode_bytes

META: dict[str, object] = {"impl": "sdpa-flash", "dtype": "bfloat16"}


def test_summarize_trace_is_the_summary_with_its_findings(trace_bytes: Callable[[str], bytes]) -> None:
    analysis = analyze(decode_bytes(trace_bytes("findings_cpu_mixed")))
    summary = summarize_trace(analysis, file="f", worker="w", span="1", metadata=META)
    plain = summarize_analysis(analysis, file="f", worker="w", span="1")
    assert summary.findings and summary.findings == find(analysis, plain, metadata=META)
    plain.findings = summary.findings
    assert summary.headline and summary.headline == headline(plain)  # the headline reads the findings
    plain.headline = summary.headline
    assert summary == plain


def test_the_loader_summarizes_a_file_with_summarize_trace(tmp_path: Path,
                                                          trace_bytes: Callable[[str], bytes]) -> None:
    (tmp_path / "w.1.pt.trace.json").write_bytes(trace_bytes("findings_cpu_mixed"))
    (run,) = resolve_runs(str(tmp_path))
    (trace,) = run.files
    loaded = Loader().summarize_file(trace, metadata=META)
    analysis = analyze(decode_bytes(trace_bytes("findings_cpu_mixed")))
    assert loaded == summarize_trace(analysis, file=trace.name, worker="w", span="1", metadata=META)
