"""How the service's outcomes become HTTP answers: ``Loading`` (202, polled) and ``http_errors``
(the engine's errors as TensorBoard's 404 and 400). Re-exported by ``service``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tensorboard import errors

from tb_attn_plugin.analysis.cross_run.compare import BaselineError
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.server.responses import LoadingResponse
from tb_attn_plugin.trace.events import TraceError

__all__ = ["RETRY_AFTER_MS", "Loading", "http_errors"]

RETRY_AFTER_MS = 300  # how soon a client polls a route that answered "loading"


class Loading(Exception):
    """A route's traces are still being parsed in the background: answer 202 and be polled."""

    def __init__(self, runs: list[str], pending: int, files: int) -> None:
        super().__init__(f"parsing {pending} of {files} trace files")
        self.runs, self.pending, self.files = runs, pending, files

    def body(self) -> LoadingResponse:
        return LoadingResponse(runs=self.runs, pending=self.pending, files=self.files, retry_after_ms=RETRY_AFTER_MS)


@contextlib.contextmanager
def http_errors(file: str | None = None) -> Iterator[None]:
    """The one place where the engine's errors become HTTP errors, as a ``with`` block or a
    decorator (``@http_errors()``): something the trace lacks (``views.ViewError``: an unknown
    step, layer or phase) and a trace that cannot be read (``TraceError``; "cannot read FILE: ..."
    when ``file`` is given) are 404s, a baseline that cannot be one is a 400. Anything else is a
    bug and stays a 500."""
    try:
        yield
    except views.ViewError as exc:
        raise errors.NotFoundError(str(exc)) from None
    except TraceError as exc:
        raise errors.NotFoundError(f"cannot read {file}: {exc}" if file is not None else str(exc)) from None
    except BaselineError as exc:
        raise errors.InvalidArgumentError(str(exc)) from None
