"""``tb-attn gate``'s report: the text a CI log shows and the JSON (``tb-attn.gate/1``)."""

from __future__ import annotations

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.analysis.cross_run.gate import GateReport
from tb_attn_plugin.cli.text import json_text, lines_text, ms_text, printable
from tb_attn_plugin.vocab.names import display_name

__all__ = ["gate_json", "gate_text"]


def gate_text(report: GateReport) -> str:
    lines = [f"attention gate: {report.candidate} against baseline {report.baseline} ({report.clock} time)"]
    lines += [f"  warning: {printable(w)}" for w in report.warnings]
    for c in report.checks:
        fmt = (lambda us: f"{wording.ms(us)} ms") if c.unit == "us" else (lambda b: f"{wording.mib(b)} MiB")
        change = "n/a" if c.change is None else f"{c.change:+.1%}"
        verdict = {"ok": "ok", "regression": "REGRESSION"}.get(c.verdict, "UNDECIDED")
        lines.append(f"  {c.name:<6} baseline {fmt(c.baseline):>12}  candidate {fmt(c.candidate):>12}  "
                     f"change {change:>7}  tolerance {c.tolerance:.0%}  {verdict}")
        lines.append(f"         ({c.detail})")
    if report.layers:
        lines.append("  per layer, time per step (baseline -> candidate):")
        for layer, base, cand in report.layers:
            lines.append(f"    L{layer:<3} {ms_text(base):>10} ms -> {ms_text(cand):>10} ms")
    lines.append("PASS: attention did not regress beyond the tolerances" if report.passed
                 else "FAIL: attention regressed beyond the tolerances" if report.regressed
                 else "UNDECIDED: what the runs can tell spans the tolerance (the time check says why): profile both "
                      "with --repeats 3 in one sweep, or in turns with --append (docs/ci.md)")
    return lines_text(lines)


def gate_json(report: GateReport) -> str:
    body = {
        # The runs' names as every route and --run take them: one-to-one, a byte 0xFF as \xff.
        "schema": "tb-attn.gate/1", "baseline": display_name(report.baseline),
        "candidate": display_name(report.candidate),
        "clock": report.clock, "passed": report.passed, "noisy": report.noisy, "warnings": report.warnings,
        "checks": [{"name": c.name, "unit": c.unit, "baseline": c.baseline, "candidate": c.candidate,
                    "change": c.change, "tolerance": c.tolerance, "passed": c.passed, "verdict": c.verdict,
                    "interval": list(c.interval) if c.interval is not None else None, "detail": c.detail}
                   for c in report.checks],
        "layers": [{"layer": k, "baseline_us": b, "candidate_us": c} for k, b, c in report.layers],
    }
    return json_text(body)
