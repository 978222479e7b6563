"""``Loading`` (a route still parsing: a 202 body to poll) and ``http_errors`` (the engine's errors
as TensorBoard's 404 and 400); the tests raise each by hand and check the body, the status codes
and the messages (the basic mapping is also in ``test_responses``)."""

from __future__ import annotations

import json

import msgspec
import pytest
from tensorboard import errors

from tb_attn_plugin.analysis.cross_run.compare import BaselineError
from tb_attn_plugin.analysis.views.views import ViewError
from tb_attn_plugin.server.http_status import RETRY_AFTER_MS, Loading, http_errors
from tb_attn_plugin.server.responses import LoadingResponse
from tb_attn_plugin.trace.events import ReadError, TraceError


def test_loading_says_how_many_files_are_left() -> None:
    exc = Loading(["a", "b/c"], pending=2, files=5)
    assert str(exc) == "parsing 2 of 5 trace files"
    assert (exc.runs, exc.pending, exc.files) == (["a", "b/c"], 2, 5)
    with pytest.raises(Loading, match="parsing 2 of 5"):
        raise exc


def test_the_loading_body_tells_the_client_when_to_poll() -> None:
    body = Loading(["a"], 0, 3).body()
    assert isinstance(body, LoadingResponse)
    assert json.loads(msgspec.json.encode(body)) == {"status": "loading", "runs": ["a"], "pending": 0, "files": 3,
                                                     "retry_after_ms": RETRY_AFTER_MS}
    # The tab (frontend/src/api.ts) waits what the body says if it is positive, at most 5 s.
    assert 0 < RETRY_AFTER_MS <= 5000


def test_a_missing_view_is_a_404_and_the_file_is_not_named() -> None:
    with pytest.raises(errors.NotFoundError) as caught, http_errors("w.json"):
        raise ViewError("no layer 3")
    assert caught.value.http_code == 404 and str(caught.value) == "Not found: no layer 3"


def test_a_trace_error_names_the_file_when_given() -> None:
    with pytest.raises(errors.NotFoundError) as caught, http_errors("run/w.1.pt.trace.json"):
        raise ReadError("connection reset")  # a ReadError is a TraceError: the storage failed
    assert caught.value.http_code == 404
    assert str(caught.value) == "Not found: cannot read run/w.1.pt.trace.json: connection reset"
    with pytest.raises(errors.NotFoundError, match=r"^Not found: bad JSON$"), http_errors():
        raise TraceError("bad JSON")


def test_a_baseline_error_is_a_400() -> None:
    with pytest.raises(errors.InvalidArgumentError) as caught, http_errors("ignored.json"):
        raise BaselineError("no run 'x'")
    assert caught.value.http_code == 400 and str(caught.value) == "Invalid argument: no run 'x'"


def test_the_http_error_hides_the_engine_error_it_came_from() -> None:
    """``from None``: the answer carries the message only, not a chain back into the engine."""
    with pytest.raises(errors.NotFoundError) as caught, http_errors("f.json"):
        raise TraceError("truncated")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_other_errors_pass_through_unchanged() -> None:
    original = KeyError("layer")
    with pytest.raises(KeyError) as caught, http_errors("f.json"):
        raise original
    assert caught.value is original


def test_as_a_decorator_it_passes_arguments_and_results_through() -> None:
    @http_errors("f.json")
    def view(layer: int, *, phase: str = "softmax") -> str:
        if layer < 0:
            raise ViewError(f"no layer {layer}")
        return f"{layer}:{phase}"

    assert view(2, phase="sdpa") == "2:sdpa"
    assert view(3) == "3:softmax"
    with pytest.raises(errors.NotFoundError, match="no layer -1"):
        view(-1)
    assert view(4) == "4:softmax"  # the decorator is reusable after a failure


def test_a_block_without_an_error_is_left_alone() -> None:
    with http_errors():
        value = 2 + 2
    assert value == 4
