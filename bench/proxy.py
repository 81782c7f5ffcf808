"""An HTTP proxy on loopback in front of the S3 server: a fixed latency per request, an optional bandwidth cap,
and a count of the requests and response bytes that went through.

moto answers a range GET by reading the whole object (27 MB at the default size) and slicing it, which costs
milliseconds of this 2-core machine per request and would bill every reader for the test server's work. So the
proxy fetches an object from moto once (with the client's own headers, so that moto's access rules still apply)
and answers range GETs, If-Match included, from that copy, as S3 does: cheaply, whatever the object's size.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# Connection-level headers belong to each hop, not to the message.
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"})


class _Server(ThreadingHTTPServer):
    # Readers open dozens of connections at once; the default backlog of 5 drops SYNs, costing a second each.
    request_queue_size = 512
    daemon_threads = True


@dataclass
class Traffic:
    """Requests and response body bytes counted at the proxy."""

    requests: int = 0
    bytes: int = 0


class LatencyProxy:
    """Forwards every request to ``upstream`` (host, port) after ``latency`` seconds; counts what it serves."""

    def __init__(self, upstream: tuple[str, int], latency: float, bandwidth: float | None = None) -> None:
        self.upstream = upstream
        self.latency = latency
        self.bandwidth = bandwidth
        self.traffic = Traffic()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._objects: dict[str, tuple[bytes, dict[str, str]]] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy.forward(self)

            def do_HEAD(self) -> None:
                proxy.forward(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The proxy's endpoint URL, for AWS_ENDPOINT_URL."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LatencyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> Traffic:
        """The traffic so far, and start counting afresh."""
        with self._lock:
            traffic, self.traffic = self.traffic, Traffic()
        return traffic

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer one request, late by the latency and (with a cap) by its size over the bandwidth."""
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
        # Header names are case-insensitive (hyper, under obstore, sends them in lower case): the message's own get.
        byte_range = _RANGE.fullmatch(handler.headers.get("Range", ""))
        if handler.command == "GET" and byte_range:
            status, reply, body = self._range(handler.path, headers, byte_range)
        else:
            status, reply, body = self._upstream(handler.command, handler.path, headers)
        with self._lock:
            self.traffic.requests += 1
            self.traffic.bytes += len(body)
        # On top of the server's own time, as a distant S3 adds its round trip to its work.
        time.sleep(self.latency + (len(body) / self.bandwidth if self.bandwidth else 0.0))
        handler.send_response(status)
        for key, value in reply.items():
            handler.send_header(key, value)
        if handler.command != "HEAD":
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    def _range(self, path: str, headers: dict[str, str], byte_range: re.Match) -> tuple[int, dict, bytes]:
        """A range GET answered from the object's copy, fetched from upstream on first use."""
        if path not in self._objects:
            whole = {k: v for k, v in headers.items() if k.lower() not in ("range", "if-match")}
            status, reply, body = self._upstream("GET", path, whole)
            if status != 200:
                return status, reply, body
            self._objects[path] = (body, reply)
        body, reply = self._objects[path]
        etag = next((v for k, v in reply.items() if k.lower() == "etag"), "")
        if next((v for k, v in headers.items() if k.lower() == "if-match"), etag) != etag:
            return 412, {}, b""
        size = len(body)
        first, last = byte_range.groups()
        start, end = (size - int(last), size - 1) if not first else (int(first), min(size - 1, int(last or size - 1)))
        start = max(0, start)
        kept = {k: v for k, v in reply.items() if not k.lower().startswith(("x-amz-checksum", "content-md5"))}
        return 206, kept | {"Content-Range": f"bytes {start}-{end}/{size}"}, body[start : end + 1]

    def _upstream(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict, bytes]:
        """The upstream server's answer, over this thread's kept-alive connection."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            connection.request(method, path, headers=headers)
            response = connection.getresponse()
        except (http.client.HTTPException, OSError):
            # A kept-alive upstream connection may have been closed: one fresh try.
            connection.close()
            connection.request(method, path, headers=headers)
            response = connection.getresponse()
        body = response.read()
        reply = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS}
        if method == "HEAD":
            reply["Content-Length"] = response.getheader("Content-Length", "0")
        return response.status, reply, body
