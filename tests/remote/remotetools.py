"""For the remote-logdir tests: a local S3 server, and our plugin's WSGI app over a URL.

The server is moto's standalone server behind a TCP proxy that can fail on purpose.

The code under test talks to the proxy (``LocalS3.endpoint``); the fixtures upload straight to
moto (``LocalS3.client``). Stopping the proxy is, to a client, the server going away: open
connections are reset, even halfway through a response, and new ones are refused. moto's state
lives on behind it, so ``start()`` brings the same bucket back on the same port. The proxy also
logs every request it forwards, which is how the tests count reads and check that nothing was
written.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from devtools.tbserver import free_port
from tb_attn_plugin.server.plugin import AttentionPlugin
from tb_attn_plugin.server.service import Service

__all__ = ["BUCKET", "URL", "FaultProxy", "LocalS3", "client_of", "free_port"]

BUCKET = "team-bucket"
URL = f"s3://{BUCKET}/runs"

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
_REQUEST_LINE = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]$")
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.down_bytes = 0  # forwarded from the server to the client
        self.pending = b""  # the start of a request whose headers are not complete yet
        self.body_left = 0  # request body bytes still to skip (uploads)
        self.threads: list[threading.Thread] = []
        self.pumps_done = 0


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``; ``stop()`` resets every connection."""

    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        self.upstream = upstream
        self.port = port
        self.requests: list[tuple[str, str]] = []  # (method, path and query) in order
        self.tripped = threading.Event()
        self._trip_after: int | None = None
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None
        self._connections: list[_Connection] = []
        self._running = False

    # -- control ----------------------------------------------------------------------------
    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: same port again
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._running = True
        self.tripped.clear()
        self._accepter = threading.Thread(target=self._accept, name="s3-proxy-accept", daemon=True)
        self._accepter.start()

    def stop(self) -> None:
        """Refuse new connections and reset the open ones (RST, mid-response if need be)."""
        with self._lock:
            self._running = False
            connections, self._connections = self._connections, []
        for conn in connections:
            _reset(conn.client)
            _reset(conn.upstream)
        if self._accepter is not None and self._accepter is not threading.current_thread():
            self._accepter.join(timeout=5)
        for conn in connections:
            for thread in conn.threads:
                if thread is not threading.current_thread():
                    thread.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    @property
    def running(self) -> bool:
        return self._running

    def stop_after(self, down_bytes: int) -> None:
        """Stop the whole server once a connection has sent ``down_bytes`` more to its client:
        the response in flight is cut there."""
        with self._lock:
            for conn in self._connections:
                conn.down_bytes = 0
            self._trip_after = down_bytes

    def count(self, method: str, path_part: str = "") -> int:
        with self._lock:
            return sum(m == method and path_part in p for m, p in self.requests)

    def writes(self) -> list[tuple[str, str]]:
        """Requests that could change the bucket (anything but GET and HEAD)."""
        with self._lock:
            return [(m, p) for m, p in self.requests if m not in ("GET", "HEAD")]

    # -- forwarding -------------------------------------------------------------------------
    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        while self._running:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            conn = _Connection(client, upstream)
            with self._lock:
                if not self._running:
                    _reset(client)
                    _reset(upstream)
                    return
                self._connections.append(conn)
                conn.threads = [
                    threading.Thread(target=self._pump, args=(conn, False), name="s3-proxy-up", daemon=True),
                    threading.Thread(target=self._pump, args=(conn, True), name="s3-proxy-down", daemon=True),
                ]
            for thread in conn.threads:
                thread.start()

    def _pump(self, conn: _Connection, down: bool) -> None:
        src, dst = (conn.upstream, conn.client) if down else (conn.client, conn.upstream)
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                if down:
                    limit = self._trip_after
                    if limit is not None and conn.down_bytes + len(data) > limit:
                        dst.sendall(data[: max(limit - conn.down_bytes, 0)])
                        self._trip_after = None
                        self.tripped.set()
                        threading.Thread(target=self.stop, name="s3-proxy-trip", daemon=True).start()
                        return
                    conn.down_bytes += len(data)
                else:
                    self._log_requests(conn, data)
                dst.sendall(data)
        except OSError:
            return  # reset by stop(), or by either side
        finally:
            self._pump_done(conn)

    def _pump_done(self, conn: _Connection) -> None:
        with self._lock:
            conn.pumps_done += 1
            if conn.pumps_done < 2 or conn not in self._connections:
                return  # the other direction still runs, or stop() owns the sockets
            self._connections.remove(conn)
        conn.client.close()
        conn.upstream.close()

    def _log_requests(self, conn: _Connection, data: bytes) -> None:
        buf = conn.pending + data
        while buf:
            if conn.body_left:
                skip = min(conn.body_left, len(buf))
                conn.body_left -= skip
                buf = buf[skip:]
                continue
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head, buf = buf[:end], buf[end + 4:]
            match = _REQUEST_LINE.match(head.split(b"\r\n", 1)[0])
            if match is not None:
                with self._lock:
                    self.requests.append((match.group(1).decode(), match.group(2).decode()))
            length = _CONTENT_LENGTH.search(head)
            conn.body_left = int(length.group(1)) if length else 0
        conn.pending = buf


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class LocalS3:
    """moto on a free loopback port, with a FaultProxy in front of it."""

    def __init__(self) -> None:
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        self.direct = f"http://{host}:{port}"
        self.proxy = FaultProxy((host, port))
        self.proxy.start()
        self.client: Any = boto3.client("s3", endpoint_url=self.direct, **CREDENTIALS)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    def close(self) -> None:
        self.proxy.stop()
        self.client.close()
        self.moto.stop()

    def upload(self, bucket: str, prefix: str, root: Path) -> None:
        """Every file under ``root`` to ``s3://bucket/prefix/<relative path>``."""
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}"
            self.client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())

    def delete(self, bucket: str, prefix: str) -> None:
        for key in self.listing(bucket, prefix):
            self.client.delete_object(Bucket=bucket, Key=key)

    def listing(self, bucket: str, prefix: str = "") -> dict[str, tuple[str, int]]:
        """Key -> (ETag, size) of every object under ``prefix``."""
        out: dict[str, tuple[str, int]] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                out[item["Key"]] = (item["ETag"], item["Size"])
        return out

    def get(self, bucket: str, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body


def client_of(logdir: str, **options: Any) -> tuple[Client, Service]:
    """TensorBoard's WSGI app with our plugin over ``logdir``, and the plugin's Service."""
    plugin = AttentionPlugin(base_plugin.TBContext(logdir=logdir))
    options.setdefault("relist_min_s", 0)  # these tests refresh right after changing the bucket
    service = Service(logdir, **options)
    plugin._service = service
    return Client(application.TensorBoardWSGI([plugin])), service
