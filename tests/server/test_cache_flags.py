"""--tb_attn_cache_dir: the tab reads summaries that ``tb-attn summarize --cache-dir`` put there,
under its own peaks, decodes only for the views that need events, and never takes a cache inside
the logdir."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import threading
from pathlib import Path

import pytest
from tensorboard.plugins import base_plugin

from tb_attn_plugin.cli.main import main
from tb_attn_plugin.server.plugin import AttentionLoader, AttentionPlugin


def _plugin(logdir: Path, *argv: str) -> AttentionPlugin:
    parser = argparse.ArgumentParser()
    loader = AttentionLoader()
    loader.define_flags(parser)
    flags = parser.parse_args(list(argv))
    flags.logdir = str(logdir)
    loader.fix_flags(flags)
    plugin = loader.load(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    assert isinstance(plugin, AttentionPlugin)
    plugin.service.wait_s = 30
    return plugin


def test_the_tab_reads_the_cli_s_cache_under_its_own_peaks(tmp_path: Path, builtin_logdir: Path, decodes: list[str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    logdir, cache = tmp_path / "logdir", tmp_path / "cache"
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, logdir / run)
    assert main(["summarize", str(logdir), "--format", "json", "--cache-dir", str(cache)]) == 0
    capsys.readouterr()
    decodes.clear()  # the CLI's own parses
    plugin = _plugin(logdir, "--tb_attn_cache_dir", str(cache), "--tb_attn_cache_max_mb", "64",
                     "--tb_attn_peak_flops", "2.5T", "--tb_attn_peak_bw", "100 GB/s")
    assert plugin.service.engine._files.cache_max_bytes == 64 << 20
    worker = plugin.service.summary("naive", None, None).workers[0]
    assert decodes == []  # from the cache
    assert worker.roofline is not None and worker.roofline.source == "given by --peak-flops and --peak-bw"
    assert worker.roofline.peak_flops["fp32"] == 2.5e12  # the cache holds the trace's own; the tab's applied
    plugin.service.drilldown("naive", None, None, layer=0, phase=None, backward=False, profiler_installed=False)
    assert len(decodes) == 1  # a view of events decodes the trace, once
    plugin.service.summary("sdpa", None, None)
    assert len(decodes) == 1


def test_cache_flags_are_checked_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(base_plugin.FlagsError, match=r"--tb_attn_cache_dir: the cache directory .* is inside the log"):
        _plugin(tmp_path, "--tb_attn_cache_dir", str(tmp_path / "cache"))
    with pytest.raises(base_plugin.FlagsError, match="--tb_attn_cache_max_mb must be at least 1"):
        _plugin(tmp_path, "--tb_attn_cache_max_mb", "0")
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_is_one_warning_from_the_tab(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two parse jobs that fail to write at once both passed the loader's check before writing,
    and each said so: the warning is said once per process and cache, whoever finds it first."""
    from helpers import HAND_TRACES

    from tb_attn_plugin.engine.summary_cache import CacheWriteError, SummaryCache

    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    for worker in ("a", "b"):
        shutil.copy(HAND_TRACES / "steps.json", run / f"{worker}_1.1.pt.trace.json")
    both = threading.Barrier(2, timeout=10)

    def failing(self: SummaryCache, trace: object, payload: bytes) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            both.wait()  # both jobs inside the write at once
        raise CacheWriteError(f"cannot write the summary cache at {self.root}: No space left on device")

    monkeypatch.setattr(SummaryCache, "put", failing)
    plugin = _plugin(tmp_path / "logdir", "--tb_attn_cache_dir", str(tmp_path / "cache"),
                     "--tb_attn_parse_workers", "2")
    assert len(plugin.service.summary("run", None, None).workers) == 2
    assert not both.broken
    assert sum("cannot write the summary cache" in m for m in caplog.messages) == 1
