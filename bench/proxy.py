"""An HTTP proxy on loopback in front of the S3 server: a fixed latency per request, an optional bandwidth cap,
and a count of the requests and response bytes that went through.

moto answers a range GET by reading the whole object (27 MB at the default size) and slicing it, which costs
milliseconds of this 2-core machine per request and would bill every reader for the test server's work. So the
proxy fetches an object from moto once (with the client's own headers, so that moto's access rules still apply)
and answers range GETs, If-Match included, from that copy, as S3 does: cheaply, whatever the object's size.

One event loop serves every connection. A server of a thread per connection (http.server's) spent 0.29 ms of
CPU a request under one GIL, so a reader's 128 requests in flight queued 37 ms for it on top of the latency: a
bill for the test server's work again, paid per request, as S3 does not charge it.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import threading
from dataclasses import dataclass

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# Connection-level headers belong to each hop, not to the message.
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"})
_REASONS = {200: "OK", 206: "Partial Content", 304: "Not Modified", 403: "Forbidden", 404: "Not Found"}


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
        self._objects: dict[str, tuple[bytes, dict[str, str]]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """The proxy's endpoint URL, for AWS_ENDPOINT_URL."""
        assert self._server is not None, "the proxy is not serving: use it as a context manager"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        # Readers open hundreds of connections at once; a short backlog drops SYNs, costing a second each.
        started = asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self._server = asyncio.run_coroutine_threadsafe(started, self._loop).result()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def forget(self, name: str) -> None:
        """Drop the copies of the objects whose path ends with ``name``: their next range read fetches them anew, as
        after they were replaced upstream."""
        for path in [path for path in self._objects if path.endswith(name)]:
            self._objects.pop(path, None)

    def reset(self) -> Traffic:
        """The traffic so far, and start counting afresh."""
        with self._lock:
            traffic, self.traffic = self.traffic, Traffic()
        return traffic

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection's requests, one after the other, as HTTP/1.1 keeps a connection alive."""
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")[:-2]
                method, path, _ = request_line.split(" ", 2)
                headers = {name.strip(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
                lower = {key.lower(): value for key, value in headers.items()}
                body = await reader.readexactly(int(lower.get("content-length", 0)))
                status, reply, payload = await self._answer(method, path, headers, lower, body)
                with self._lock:
                    self.traffic.requests += 1
                    self.traffic.bytes += len(payload)
                # On top of the server's own time, as a distant S3 adds its round trip to its work.
                await asyncio.sleep(self.latency + (len(payload) / self.bandwidth if self.bandwidth else 0.0))
                lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
                lines += [f"{key}: {value}" for key, value in reply.items()]
                if method != "HEAD":
                    lines.append(f"Content-Length: {len(payload)}")
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                if method != "HEAD":
                    writer.write(payload)
                await writer.drain()
        finally:
            writer.close()

    async def _answer(
        self, method: str, path: str, headers: dict[str, str], lower: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes | memoryview]:
        forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
        byte_range = _RANGE.fullmatch(lower.get("range", ""))
        if method == "GET" and byte_range:
            return await self._range(path, forwarded, lower, byte_range)
        return await asyncio.to_thread(_upstream, self.upstream, method, path, forwarded, body)

    async def _range(
        self, path: str, headers: dict[str, str], lower: dict[str, str], byte_range: re.Match
    ) -> tuple[int, dict[str, str], bytes | memoryview]:
        """A range GET answered from the object's copy, fetched from upstream on first use."""
        # Read once: forget() may drop the copy from another thread at any moment.
        copy = self._objects.get(path)
        if copy is None:
            whole = {k: v for k, v in headers.items() if k.lower() not in ("range", "if-match")}
            status, reply, body = await asyncio.to_thread(_upstream, self.upstream, "GET", path, whole, b"")
            if status != 200:
                return status, reply, body
            copy = self._objects[path] = (body, reply)
        body, reply = copy
        etag = next((v for k, v in reply.items() if k.lower() == "etag"), "")
        if lower.get("if-match", etag) != etag:
            return 412, {}, b""
        size = len(body)
        first, last = byte_range.groups()
        start, end = (size - int(last), size - 1) if not first else (int(first), min(size - 1, int(last or size - 1)))
        start = max(0, start)
        kept = {k: v for k, v in reply.items() if not k.lower().startswith(("x-amz-checksum", "content-md5"))}
        # A view, not a copy: the connection writes straight from the object's bytes.
        return 206, kept | {"Content-Range": f"bytes {start}-{end}/{size}"}, memoryview(body)[start : end + 1]


def _upstream(
    upstream: tuple[str, int], method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """The upstream server's answer, on a connection of its own (listings, HEADs and first reads are few)."""
    connection = http.client.HTTPConnection(*upstream, timeout=120)
    try:
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        reply = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS}
        if method == "HEAD":
            reply["Content-Length"] = response.getheader("Content-Length", "0")
        return response.status, reply, payload
    finally:
        connection.close()
