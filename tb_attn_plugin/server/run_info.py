"""A run's metadata as the runs list shows it (``responses.RunInfo``): a few fields, checked and clipped.

A run's ``tb_attn_run.json`` may hold anything up to 1 MiB (docs/limits.md), and the tab lists
the runs every second while their figures are parsed: ``/runs`` carries these fields of each
run, so its body grows with the number of runs, never with what their files hold. The whole
file is one run's ``/metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from tb_attn_plugin.server.responses import RunInfo
from tb_attn_plugin.vocab.ranks import MAX_WORLD_SIZE
from tb_attn_plugin.vocab.scopes import MAX_CONTEXT

__all__ = ["ERROR_BYTES", "ERROR_CHARS", "INFO_BYTES", "INFO_CHARS", "run_info"]

INFO_CHARS = 200  # a string field's most characters in ``RunInfo``, the ellipsis of a cut one included
ERROR_CHARS = 500  # the runner's error: the first line of an exception (an out-of-memory one is about 400)
#: A string field's most bytes as JSON: characters that JSON writes in six bytes (controls) or that
#: take four in UTF-8 cut it shorter, so a run's entry stays under about 7 KB whatever its file holds.
INFO_BYTES, ERROR_BYTES = 400, 1000
ELLIPSIS = "\u2026"
_MAX_SIZE = MAX_CONTEXT - 1  # a sequence length or a batch size: as a generation step's context


def run_info(metadata: Mapping[str, object] | None) -> RunInfo | None:
    """The fields of ``metadata`` the runs list shows; None without metadata."""
    if metadata is None:
        return None
    config = metadata.get("config")
    cfg: Mapping[str, object] = config if isinstance(config, dict) else {}
    clipped: dict[str, int] = {}

    def text(key: str, *values: object, limit: int = INFO_CHARS, most: int = INFO_BYTES) -> str | None:
        """The first of ``values`` that is a non-empty string, cut to ``limit`` characters and
        ``most`` bytes of JSON."""
        value = next((v for v in values if isinstance(v, str) and v), None)
        if value is None or (len(value) <= limit and _json_bytes(value) <= most):
            return value
        clipped[key] = len(value)
        lo, hi = 0, min(len(value), limit) - 1  # the longest prefix that fits, with the ellipsis
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _json_bytes(value[:mid]) + len(ELLIPSIS.encode()) <= most else (lo, mid - 1)
        return value[:lo] + ELLIPSIS

    return RunInfo(
        model=text("model", metadata.get("model")),
        impl=text("impl", metadata.get("impl"), cfg.get("impl")),
        seq=_integer(cfg.get("seq"), _MAX_SIZE),
        batch=_integer(cfg.get("batch"), _MAX_SIZE),
        dtype=text("dtype", metadata.get("dtype"), cfg.get("dtype")),
        mode=text("mode", cfg.get("mode")),
        device=text("device", metadata.get("device")),
        device_name=text("device_name", metadata.get("device_name")),
        user=text("user", metadata.get("user")),
        host=text("host", metadata.get("host")),
        started_at=text("started_at", metadata.get("started_at")),
        torch_version=text("torch_version", metadata.get("torch_version")),
        parallel=text("parallel", metadata.get("parallel")),
        world_size=_integer(metadata.get("world_size"), MAX_WORLD_SIZE),
        status=text("status", metadata.get("status")),
        error=text("error", metadata.get("error"), limit=ERROR_CHARS, most=ERROR_BYTES),
        clipped=clipped,
    )


def _json_bytes(text: str) -> int:
    return len(msgspec.json.encode(text)) - 2


def _integer(value: object, most: int) -> int | None:
    """``value`` if it is an integer from 1 to ``most`` (a bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most else None
