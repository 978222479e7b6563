"""How a notebook shows ``Summaries``: an overview with each worker's headline, the findings with
their explanation and suggestion, and no markup or escape sequence from a name in a trace."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

import tb_attn
from tb_attn import html as html_module
from tb_attn_plugin.types.schema import Evidence, FileError, Finding, RunSummary

HOSTILE = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def hostile(builtin_logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> tb_attn.Summaries:
    """The naive run under a run directory and a worker named to inject markup (the run's name
    holds no "/": a directory name cannot), with a finding and a file error to match."""
    logdir = tmp_path_factory.mktemp("hostile")
    run = logdir / "<img src=x onerror=alert(1)>"
    run.mkdir()
    (trace,) = (builtin_logdir / "naive").glob("*.pt.trace.json*")
    shutil.copy(trace, run / "<b>w\x1b[2J.1.pt.trace.json")
    r = tb_attn.load(logdir, jobs=1)
    (s,) = r.runs
    (w,) = s.workers
    bad = Finding(id="x", severity="high", title=HOSTILE, explanation="a & b < c", suggestion='"quoted" <i>',
                  evidence=Evidence(layers=[], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))
    worker = msgspec.structs.replace(w, findings=[*w.findings, bad])
    run_summary = msgspec.structs.replace(s, workers=[worker], errors=[FileError(file=HOSTILE, error="<u>no</u>")])
    return tb_attn.Summaries([run_summary], source=f"/logs/{HOSTILE}")


def test_html_escapes_every_name_and_text(hostile: tb_attn.Summaries) -> None:
    page = hostile._repr_html_()
    for raw in ("<script", "<img", "<b>", "<i>", "<u>"):
        assert raw not in page
    for shown in ("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;",
                  "&lt;b&gt;w", "a &amp; b &lt; c", "&quot;quoted&quot; &lt;i&gt;", "&lt;u&gt;no&lt;/u&gt;"):
        assert shown in page


def test_html_shows_the_overview_and_the_findings(hostile: tb_attn.Summaries) -> None:
    page = hostile._repr_html_()
    ((w,),) = [run.workers for run in hostile.runs]
    assert "1 run, 1 worker trace, 1 unreadable" in page
    assert w.headline.split(" (")[0] in page and "Attention is" in w.headline
    assert f"Findings ({len(w.findings)})" in page
    for f in w.findings:
        for text in (f.severity, f.title, f.explanation, f.suggestion):
            assert msgspec.json.encode(text) and _escaped(text) in page
    assert page.count("<tr>") == 1 + 1 + 1 + len(w.findings) + 1 + 1  # header and row of each table


def _escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_repr_is_a_few_printable_lines(hostile: tb_attn.Summaries) -> None:
    text = repr(hostile)
    assert "\x1b" not in text and r"\x1b[2J" in text
    lines = text.splitlines()
    assert lines[0].startswith("<tb-attn summaries of /logs/") and "1 run, 1 worker trace" in lines[0]
    ((w,),) = [run.workers for run in hostile.runs]
    assert "(cpu, naive, 2 layers, " in lines[1] and lines[1].endswith(w.headline)
    assert "unreadable: <u>no</u>" in lines[2]


def test_an_empty_result() -> None:
    empty = tb_attn.Summaries([RunSummary(run="r", metadata=None, workers=[], errors=[])])
    assert "1 run, 0 worker traces" in repr(empty) and "Findings" not in empty._repr_html_()


def test_a_thousand_ranks_show_a_bounded_overview(hostile: tb_attn.Summaries) -> None:
    """A many-rank job's overview lists the first workers and findings and counts the rest."""
    (run,) = hostile.runs
    worker = run.workers[0]
    many = msgspec.structs.replace(run, workers=[msgspec.structs.replace(worker, worker=f"host_rank{r}")
                                                 for r in range(1000)])
    big = tb_attn.Summaries([many], source="/logs/job")
    html = big._repr_html_()
    assert html.count("host_rank") == 2 * html_module.MAX_ROWS  # the workers' table and the findings'
    assert f"... and {1000 - html_module.MAX_ROWS} more: <code>r.workers()</code>" in html
    assert f"... and {1000 * len(worker.findings) - html_module.MAX_ROWS} more: <code>r.findings()</code>" in html
    lines = repr(big).splitlines()
    assert len(lines) == html_module.MAX_ROWS + 2
    assert lines[-1].startswith("  ... and 969 more lines")  # 1,000 workers + 1 error - 32
