"""Run metadata (``tb_attn_run.json``, ``docs/runner.md``): read, bounded and checked here, for
every door (the CLI, the notebook API, the tab's listing and ``/metadata``).

The file is anyone's JSON, so what leaves this module is bounded: at most ``MAX_BYTES`` read; a
JSON object or nothing; nested at most ``MAX_DEPTH`` levels (a deeper value, object or array, is
cut to null, with a note), so that no encoder, recursive or not, meets a value deeper than the
summary's own types plus ``MAX_DEPTH``; and every string encodable (a lone surrogate escape becomes
its text). The depth is found on the bytes before they are parsed (escapes and strings left out,
brackets counted in numpy), so a 1 MiB file of brackets is cut, not refused by the parser's recursion.

A local file with more than one hard link is refused with a note: its content is served as it is
(``/metadata``), and its other name may lie outside the log directory (``io.read_small``'s
``single_link``). The run loads without metadata.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import msgspec
import numpy as np

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.events import LinkedFileError, ReadError
from tb_attn_plugin.types.encoding import to_json

__all__ = ["MAX_BYTES", "MAX_DEPTH", "Metadata", "RunMetadata", "parse_metadata", "read_metadata",
           "read_metadata_many"]

#: The largest metadata file read (the runner writes about 2 KB).
MAX_BYTES = 1 << 20
#: The deepest nesting kept: the top-level object is level 1 (the runner writes 4 levels).
MAX_DEPTH = 32

Metadata = dict[str, object]

# An escape in a JSON string (outside strings JSON has no backslash), and every byte but quotes and
# brackets: what the depth is found without.
_ESCAPE = re.compile(rb"\\.", re.S)
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class RunMetadata(NamedTuple):
    """A run's metadata (None: no file, not JSON, not an object, or refused) and what was done to
    it, in one line (None: nothing)."""

    value: Metadata | None
    note: str | None = None


def read_metadata(path: str | None) -> RunMetadata:
    """The metadata file at ``path`` (None: the run has none). Never raises: a file that cannot be
    read is no metadata; one refused for its links says so in ``note``."""
    if path is None:
        return RunMetadata(None)
    got = read_metadata_many([path])[path]
    return got if isinstance(got, RunMetadata) else RunMetadata(None)


def read_metadata_many(paths: list[str]) -> dict[str, RunMetadata | ReadError]:
    """Several metadata files in one batch (one round of requests on object stores), each its
    metadata or the storage's error (``ReadError``: worth reading again later)."""
    out: dict[str, RunMetadata | ReadError] = {}
    for path, raw in io.read_many(paths, limit=MAX_BYTES, single_link=True).items():
        if isinstance(raw, ReadError):
            out[path] = raw
        elif isinstance(raw, LinkedFileError):
            out[path] = RunMetadata(None, f"{raw}: not read")
        elif isinstance(raw, bytes):
            value, note = parse_metadata(raw)
            out[path] = RunMetadata(value, None if note is None else f"{path}: {note}")
        else:  # not a regular file, over MAX_BYTES, not gzip as it claims: no metadata
            out[path] = RunMetadata(None)
    return out


def parse_metadata(raw: bytes) -> RunMetadata:
    """The metadata in ``raw``, cut at ``MAX_DEPTH`` levels; None if it is not a JSON object."""
    note = None
    depth = _depth(raw)
    if depth > MAX_DEPTH:
        cut = _cut(raw, MAX_DEPTH)
        if cut is None:
            return RunMetadata(None)  # brackets that do not pair: not JSON
        raw = cut
        note = f"nested {depth} levels deep: values below level {MAX_DEPTH} are cut to null"
    try:
        value = json.loads(raw)
    except ValueError:
        return RunMetadata(None)
    if not isinstance(value, dict):
        return RunMetadata(None)
    try:
        msgspec.json.encode(value)
    except UnicodeEncodeError:  # a lone surrogate escape ("\ud800") somewhere in it: its text instead
        value = json.loads(to_json(value))
    return RunMetadata(value, note)


def _depth(raw: bytes) -> int:
    """The deepest nesting of objects and arrays in ``raw``: its escapes dropped, then every byte but
    quotes and brackets, then the brackets between quotes (about a third of what parsing it costs)."""
    data = np.frombuffer(_ESCAPE.sub(b"", raw).translate(None, _NOT_STRUCTURE), np.uint8)
    if not len(data):
        return 0
    outside = np.cumsum(data == ord('"'), dtype=np.int64) % 2 == 0
    return int(np.cumsum(_OPEN[data] * outside, dtype=np.int64).max(initial=0))


def _cut(raw: bytes, keep: int) -> bytes | None:
    """``raw`` with every value that opens at level ``keep`` + 1 replaced by null; None where the
    brackets do not pair."""
    steps = _OPEN[np.frombuffer(raw, np.uint8)] * ~_in_strings(raw)
    levels = np.cumsum(steps, dtype=np.int64)
    starts = np.flatnonzero((steps == 1) & (levels == keep + 1))
    ends = np.flatnonzero((steps == -1) & (levels == keep))
    if len(starts) != len(ends) or np.any(ends < starts) or np.any(starts[1:] < ends[:-1]):
        return None
    parts, done = [], 0
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        parts += [raw[done:start], b"null"]
        done = end + 1
    parts.append(raw[done:])
    return b"".join(parts)


def _in_strings(raw: bytes) -> np.ndarray:
    """Whether each byte of ``raw`` lies in a JSON string, its quotes included: a quote ends or
    opens one unless an odd run of backslashes precedes it (in numpy: no Python step per string)."""
    data = np.frombuffer(raw, np.uint8)
    index = np.arange(len(data), dtype=np.int64)
    slash = data == ord("\\")
    last_other = np.maximum.accumulate(np.where(slash, -1, index))  # the last byte that is no backslash
    run = np.zeros(len(data), np.int64)
    run[1:] = index[:-1] - last_other[:-1]  # backslashes just before each byte
    quote = (data == ord('"')) & (run % 2 == 0)
    opened = np.cumsum(quote) % 2 == 1
    return opened | quote
