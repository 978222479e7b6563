"""The Attention tab: TensorBoard plugin ``tb_attn``. Routes only; the work is in ``service``.

Kept light to import: TensorBoard imports this module while loading plugins, and an import
error here would take the whole server down. numpy, msgspec and the engine load on the first
request.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import mimetypes
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_MB

if TYPE_CHECKING:
    from tb_attn_plugin.engine.ranksel import RankSet
    from tb_attn_plugin.server.service import Service

__all__ = ["STATIC_DIR", "AttentionLoader", "AttentionPlugin"]

PLUGIN_NAME = "tb_attn"
DEFAULT_CACHE_MB = 1024
DEFAULT_PARSE_WORKERS = 2
DEFAULT_PARSE_TIMEOUT_S = 600
#: Trace files parsed ahead for the runs list when --tb_attn_prefetch_files is not given; None:
#: as many as fit in the cache (prefetch.budget).
DEFAULT_PREFETCH_FILES: int | None = None
STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
_JSON = "application/json"

WSGIApp = Callable[..., Any]


def _to_json(value: Any) -> bytes:
    from tb_attn_plugin.types.encoding import (
        to_json,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
    )

    return to_json(value)


class AttentionLoader(base_plugin.TBLoader):
    """The entry point: adds the tab's flags to TensorBoard's command line."""

    def define_flags(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("tb_attn (the Attention tab)")
        group.add_argument("--tb_attn_cache_mb", type=int, default=DEFAULT_CACHE_MB, metavar="MB",
                           help="memory for parsed traces kept for the Attention tab (default %(default)s MiB)")
        group.add_argument("--tb_attn_max_trace_mb", type=int, default=DEFAULT_MAX_TRACE_MB, metavar="MB",
                           help="refuse trace files larger than this, uncompressed (default %(default)s MiB)")
        group.add_argument("--tb_attn_parse_workers", type=int, default=DEFAULT_PARSE_WORKERS, metavar="N",
                           help="threads that parse the traces users open (default %(default)s; one more "
                                "parses the newest runs ahead for the runs list)")
        group.add_argument("--tb_attn_prefetch_files", type=int, default=None, metavar="N",
                           help="parse at most N trace files of the newest runs ahead, for the runs list's figures "
                                "(default: as many as fit in the cache; 0: parse only what users open)")
        group.add_argument("--tb_attn_parse_timeout_s", type=int, default=DEFAULT_PARSE_TIMEOUT_S, metavar="S",
                           help="give up on a trace whose reading takes longer than this (default %(default)s s)")
        group.add_argument("--tb_attn_peak_flops", default=None, metavar="RATE",
                           help="the roofline's peak FLOP/s for every trace and dtype (e.g. 312T), in place of the "
                                "trace's device table or the runner's probes")
        group.add_argument("--tb_attn_peak_bw", default=None, metavar="RATE",
                           help="the roofline's peak memory bandwidth in bytes/s (e.g. 2.0T)")
        group.add_argument("--tb_attn_cache_dir", default=None, metavar="DIR|URL",
                           help="the summary cache (a directory or an fsspec URL such as s3://team/tb-attn-cache/) "
                                "that `tb-attn summarize --cache-dir` fills: summaries found there are not parsed")
        group.add_argument("--tb_attn_cache_max_mb", type=int, default=None, metavar="MB",
                           help="bound a local --tb_attn_cache_dir to this size, evicting the least recently used")

    def fix_flags(self, flags: argparse.Namespace) -> None:
        for name in ("tb_attn_cache_mb", "tb_attn_max_trace_mb", "tb_attn_parse_workers", "tb_attn_parse_timeout_s",
                     "tb_attn_cache_max_mb"):
            value = getattr(flags, name, None)
            if value is not None and value < 1:
                raise base_plugin.FlagsError(f"--{name} must be at least 1, got {value}")
        prefetch = getattr(flags, "tb_attn_prefetch_files", None)
        if prefetch is not None and prefetch < 0:
            raise base_plugin.FlagsError(f"--tb_attn_prefetch_files must be at least 0, got {prefetch}")
        _peaks(flags)  # a bad rate stops TensorBoard at start-up, with its flag named
        cache, logdir = getattr(flags, "tb_attn_cache_dir", None), getattr(flags, "logdir", None)
        if cache and logdir:
            from tb_attn_plugin.engine.summary_cache import (
                check_outside,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
            )

            try:
                check_outside(str(cache), str(logdir))
            except ValueError as exc:
                raise base_plugin.FlagsError(f"--tb_attn_cache_dir: {exc}") from None

    def load(self, context: base_plugin.TBContext) -> AttentionPlugin:
        return AttentionPlugin(context)


def _peaks(flags: argparse.Namespace) -> tuple[float | None, float | None]:
    """(``--tb_attn_peak_flops``, ``--tb_attn_peak_bw``) as rates; FlagsError for a bad one."""
    from tb_attn_plugin.analysis.measures.peaks import (
        parse_rate,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
    )

    out: list[float | None] = []
    for name in ("tb_attn_peak_flops", "tb_attn_peak_bw"):
        text = getattr(flags, name, None)
        try:
            out.append(None if text is None else parse_rate(str(text)))
        except ValueError as exc:
            raise base_plugin.FlagsError(f"--{name} {exc}") from None
    return out[0], out[1]


Handler = Callable[[wrappers.Request], wrappers.Response]


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logdir = context.logdir or ""
        flags = context.flags
        self._cache_mb = getattr(flags, "tb_attn_cache_mb", None) or DEFAULT_CACHE_MB
        self._max_trace_mb = getattr(flags, "tb_attn_max_trace_mb", None) or DEFAULT_MAX_TRACE_MB
        self._parse_workers = getattr(flags, "tb_attn_parse_workers", None) or DEFAULT_PARSE_WORKERS
        self._parse_timeout_s = getattr(flags, "tb_attn_parse_timeout_s", None) or DEFAULT_PARSE_TIMEOUT_S
        prefetch = getattr(flags, "tb_attn_prefetch_files", None)
        self._prefetch_files: int | None = DEFAULT_PREFETCH_FILES if prefetch is None else prefetch
        self._peaks = _peaks(flags)
        self._cache_dir: str | None = getattr(flags, "tb_attn_cache_dir", None) or None
        cache_max_mb = getattr(flags, "tb_attn_cache_max_mb", None)
        self._cache_max_bytes = None if cache_max_mb is None else int(cache_max_mb) << 20
        self._service: Service | None = None
        self._service_lock = threading.Lock()

    @property
    def service(self) -> Service:
        """The one service of this logdir, built on the first request (the constructor stays
        cheap). TensorBoard's first requests come together on several threads (the plugin
        listing's ``is_active`` and the tab's routes): one builds it, with the import of the
        service module, while the others wait, so that no thread ever sees a second service or a
        module half imported."""
        service = self._service
        if service is None:
            with self._service_lock:
                if self._service is None:
                    from tb_attn_plugin.server.service import (
                        Service,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
                    )

                    self._service = Service(self._logdir, cache_bytes=self._cache_mb << 20,
                                            max_trace_bytes=self._max_trace_mb << 20,
                                            parse_workers=self._parse_workers, parse_timeout_s=self._parse_timeout_s,
                                            prefetch_files=self._prefetch_files, peaks=self._peaks,
                                            cache_dir=self._cache_dir, cache_max_bytes=self._cache_max_bytes)
                service = self._service
        return service

    def is_active(self) -> bool:
        """Whether the logdir holds traces. Cheap: cached for a few seconds, and a local walk
        stops at the first trace file. Inactive, the tab still opens from TensorBoard's
        "inactive" menu and explains how to produce traces."""
        return bool(self._logdir) and self.service.has_traces()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention")

    def get_plugin_apps(self) -> dict[str, WSGIApp]:
        static = {"/index.js": self._serve_index, "/static/*": self._serve_static}
        data = {
            "/runs": self._serve_runs,
            "/metadata": self._serve_metadata,
            "/summary": self._serve_summary,
            "/ranks": self._serve_ranks,
            "/drilldown": self._serve_drilldown,
            "/memory": self._serve_memory,
            "/timeline": self._serve_timeline,
            "/trace": self._serve_trace,
            "/compare": self._serve_compare,
            "/scaling": self._serve_scaling,
            "/strategies": self._serve_strategies,
        }
        apps = {route: wrappers.Request.application(handler) for route, handler in static.items()}
        apps.update({route: wrappers.Request.application(self._answer_loading(handler))
                     for route, handler in data.items()})
        return apps

    def _answer_loading(self, handler: Handler) -> Callable[..., wrappers.Response]:
        """202 with ``{"status": "loading", ...}`` while the route's traces are parsed in the
        background."""

        @functools.wraps(handler)
        def route(request: wrappers.Request) -> wrappers.Response:
            self.service  # noqa: B018 -- built (and its module imported) before anything reads them
            from tb_attn_plugin.server.service import (
                Loading,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
            )

            try:
                return handler(request)
            except Loading as loading:
                return http_util.Respond(request, _to_json(loading.body()), _JSON, code=202,
                                         headers=[("Retry-After", "1")])

        return route

    # -- data routes ----------------------------------------------------------------------
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        refresh = request.args.get("refresh") in ("1", "true")
        return http_util.Respond(request, _to_json(self.service.runs_response(refresh=refresh)), _JSON)

    def _serve_metadata(self, request: wrappers.Request) -> wrappers.Response:
        return http_util.Respond(request, self.service.metadata_body(_required(request, "run")), _JSON)

    def _serve_summary(self, request: wrappers.Request) -> wrappers.Response:
        run, worker, span = _required(request, "run"), request.args.get("worker"), request.args.get("span")
        return http_util.Respond(request, _to_json(self.service.summary(run, worker, span)), _JSON)

    def _serve_ranks(self, request: wrappers.Request) -> wrappers.Response:
        body = self.service.ranks(_required(request, "run"), margin=_float(request, "margin"),
                                  selection=_rank_selection(request))
        return http_util.Respond(request, _to_json(body), _JSON)

    def _serve_drilldown(self, request: wrappers.Request) -> wrappers.Response:
        body = self.service.drilldown(
            _required(request, "run"), request.args.get("worker"), request.args.get("span"),
            layer=_layer(request), phase=request.args.get("phase") or None,
            backward=request.args.get("backward") in ("1", "true"),
            profiler_installed=importlib.util.find_spec("torch_tb_profiler") is not None,
        )
        return http_util.Respond(request, body, _JSON)

    def _serve_memory(self, request: wrappers.Request) -> wrappers.Response:
        body = self.service.memory(_required(request, "run"), request.args.get("worker"), request.args.get("span"),
                                   step=_int(request, "step"))
        return http_util.Respond(request, body, _JSON)

    def _serve_timeline(self, request: wrappers.Request) -> wrappers.Response:
        limit = _int(request, "limit")
        limit = 200_000 if limit is None else limit
        if not 1 <= limit <= 1_000_000:
            raise errors.InvalidArgumentError("limit must be in 1..1000000")
        body = self.service.timeline(
            _required(request, "run"), request.args.get("worker"), request.args.get("span"),
            step=_int(request, "step"), start_us=_float(request, "start_us"), end_us=_float(request, "end_us"),
            limit=limit,
        )
        return http_util.Respond(request, body, _JSON)

    def _serve_compare(self, request: wrappers.Request) -> wrappers.Response:
        body = self.service.compare(_run_list(request), request.args.get("baseline") or None)
        return http_util.Respond(request, _to_json(body), _JSON)

    def _serve_scaling(self, request: wrappers.Request) -> wrappers.Response:
        return http_util.Respond(request, _to_json(self.service.scaling(_run_list(request))), _JSON)

    def _serve_strategies(self, request: wrappers.Request) -> wrappers.Response:
        body = self.service.strategies(_run_list(request), request.args.get("baseline") or None,
                                       _float(request, "rel_tol"), _float(request, "loss_tol"))
        return http_util.Respond(request, _to_json(body), _JSON)

    def _serve_trace(self, request: wrappers.Request) -> wrappers.Response:
        trace, chunks = self.service.open_trace(_required(request, "run"), _required(request, "file"))
        # The open file's size, not the listing's: a file that grew (or shrank) since is sent
        # whole, with a length that matches what is sent.
        size = chunks.stored_size()
        headers = [
            ("Content-Disposition", f"attachment; filename={json.dumps(trace.name)}"),
            ("X-Content-Type-Options", "nosniff"),
            ("Content-Length", str(trace.size if size is None else size)),
        ]
        mimetype = "application/gzip" if trace.name.endswith(".gz") else _JSON
        return wrappers.Response(chunks, mimetype=mimetype, headers=headers, direct_passthrough=True)

    # -- static assets --------------------------------------------------------------------
    def _serve_index(self, request: wrappers.Request) -> wrappers.Response:
        return self._static_file(request, "index.js")

    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        prefix = f"/data/plugin/{PLUGIN_NAME}/static/"
        path = request.path
        rel = path.split(prefix, 1)[1] if prefix in path else ""
        return self._static_file(request, rel)

    def _static_file(self, request: wrappers.Request, rel: str) -> wrappers.Response:
        path = _safe_static_path(rel)
        if path is None:
            raise errors.NotFoundError(f"no asset {rel!r}")
        with open(path, "rb") as f:
            content = f.read()
        mimetype = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if path.endswith(".js"):
            mimetype = "text/javascript"
        return http_util.Respond(request, content, mimetype)


def _safe_static_path(rel: str) -> str | None:
    """The packaged asset at ``rel``, or None for anything outside the static directory."""
    if not rel or "\\" in rel or "\x00" in rel or "%" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    root = os.path.realpath(STATIC_DIR)
    candidate = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, candidate]) != root or not os.path.isfile(candidate):
        return None
    return candidate


def _run_list(request: wrappers.Request) -> list[str]:
    names = [n for n in _required(request, "runs").split(",") if n]
    return list(dict.fromkeys(names))


def _required(request: wrappers.Request, name: str) -> str:
    value = request.args.get(name)
    if not value:
        raise errors.InvalidArgumentError(f"missing argument {name!r}")
    return value


def _rank_selection(request: wrappers.Request) -> RankSet | None:
    """``ranks=0-7,512`` (``ranksel``); absent or empty: every rank."""
    raw = request.args.get("ranks")
    if not raw:
        return None
    from tb_attn_plugin.engine.ranksel import (
        parse_ranks,  # lazy: TensorBoard imports the plugin at launch; the engine loads on first use
    )

    try:
        return parse_ranks(raw)
    except ValueError as exc:
        raise errors.InvalidArgumentError(str(exc)) from None


def _required_int(request: wrappers.Request, name: str) -> int:
    value = _int(request, name)
    if value is None:
        raise errors.InvalidArgumentError(f"missing argument {name!r}")
    return value


def _layer(request: wrappers.Request) -> int:
    layer = _required_int(request, "layer")
    if layer < 0:
        raise errors.InvalidArgumentError(f"layer must be >= 0, got {layer}")
    return layer


def _int(request: wrappers.Request, name: str) -> int | None:
    """ASCII digits with an optional minus sign, at most 18 of them (so the value fits numpy's
    int64). Python's ``int`` would also take spaces, underscores and other scripts' digits."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    digits = raw[1:] if raw.startswith("-") else raw
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
        raise errors.InvalidArgumentError(f"{name} must be an integer, got {raw[:40]!r}")
    return int(raw)


def _float(request: wrappers.Request, name: str) -> float | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        if len(raw) > 64 or not raw.isascii() or not set(raw) <= set("0123456789+-.eE"):
            raise ValueError(raw)  # Python's float would also take spaces, underscores, "nan", ...
        value = float(raw)
    except ValueError:
        raise errors.InvalidArgumentError(f"{name} must be a number, got {raw[:40]!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise errors.InvalidArgumentError(f"{name} must be finite")
    return value
