"""The plugin behind TensorBoard's WSGI app, for tests: a client, and JSON routes that wait out 202s.

Routes that need a trace parsed answer ``202 {"status": "loading", ...}`` while it is parsed in
the background (docs/http_api.md); ``get_json`` polls as the tab does until the answer is final.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_attn_plugin.server.plugin import AttentionPlugin

BASE = "/data/plugin/tb_attn"


def plugin_client(logdir: Path | str, *, path_prefix: str = "", **service: Any) -> Client:
    """A client of TensorBoard's WSGI app with only our plugin; ``service`` sets Service options."""
    plugin = AttentionPlugin(base_plugin.TBContext(logdir=str(logdir)))
    if service:
        from tb_attn_plugin.server.service import Service

        plugin._service = Service(str(logdir), **service)
    return Client(application.TensorBoardWSGI([plugin], path_prefix=path_prefix))


def get(client: Client, url: str, *, timeout_s: float = 120.0) -> Any:
    """The final response to ``url``: repeated while it is 202 (still parsing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get(url)
        if response.status_code != 202:
            return response
        assert time.monotonic() < deadline, f"{url} still loading after {timeout_s} s"
        time.sleep(0.05)


def get_json(client: Client, url: str, status: int = 200, *, timeout_s: float = 120.0) -> Any:
    """The JSON (or text) body of the final response, which must have ``status``."""
    response = get(client, url, timeout_s=timeout_s)
    assert response.status_code == status, (url, response.status_code, response.get_data(as_text=True)[:300])
    if response.mimetype == "application/json":
        return json.loads(response.get_data())
    return response.get_data(as_text=True)
