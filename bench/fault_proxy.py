"""An HTTP proxy on loopback in front of an S3-compatible server (moto), which injects faults by rule: the fault
tests' and the fault soak's object store.

A rule matches requests (object listings, object reads, or any) for its first ``times`` matches or until a
moment (``until``, a burst), and answers them with an error status (503 is S3's SlowDown), resets their
connection, stalls them, or changes the server (``after``) between reading the real answer and passing it on.
Everything else is forwarded unchanged. The proxy is bounded: it answers at most ``limit`` requests (the tests'
default ``MAX_REQUESTS``) and never stalls one longer than ``MAX_STALL_S``, so a client that retries forever cannot
hang a test.
"""

from __future__ import annotations

import http.client
import math
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MAX_REQUESTS = 5_000
# Longer than the soak's longest burst: a stall holds its requests to the burst's end.
MAX_STALL_S = 120.0
ANY = "any"
# What a burst of each of the object store's faults does to every request it meets: S3 throttling (503 SlowDown),
# connections reset, requests held to the burst's end.
BURSTS = {"s3_slowdown": {"status": 503}, "s3_reset": {"reset": True}, "s3_stall": {"stall_s": MAX_STALL_S}}
# S3's own words for each status a rule answers, so that clients read what they would read from S3.
_CODES = {500: "InternalError", 503: "SlowDown"}
# Hop-by-hop and length headers are the proxy's own business, not the upstream's.
_NOT_FORWARDED = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Rule:
    """One fault: which requests (``listing``, ``object`` or ``ANY``), what happens to them, and for how many
    (``times``) or until when (``until``, on time.monotonic()'s clock); a rule with neither acts on every one."""

    kind: str
    times: int | None = None
    status: int | None = None
    reset: bool = False
    stall_s: float = 0.0
    after: Callable[[], None] | None = None
    until: float | None = None
    hits: int = 0

    def matches(self, kind: str, now: float) -> bool:
        return (
            self.kind in (kind, ANY)
            and (self.times is None or self.hits < self.times)
            and (self.until is None or now < self.until)
        )

    def stall(self, now: float) -> float:
        """How long a request this rule met now is held: its stall, never past the rule's end."""
        return min(self.stall_s, MAX_STALL_S, self.until - now if self.until is not None else math.inf)


def burst(kind: str, seconds: float) -> Rule:
    """A burst of ``kind`` (one of ``BURSTS``): every request from now for ``seconds``."""
    return Rule(ANY, until=time.monotonic() + seconds, **BURSTS[kind])


@dataclass
class FaultProxy:
    """The proxy's endpoint, its rules, and every request it answered as (kind, status); status 0 for one it
    stalled or reset without an answer."""

    upstream: str
    limit: int | None = MAX_REQUESTS
    rules: list[Rule] = field(default_factory=list)
    answered: list[tuple[str, int]] = field(default_factory=list)
    endpoint: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rule: Rule) -> Rule:
        """Apply ``rule`` to the next matching requests."""
        with self._lock:
            self.rules.append(rule)
        return rule

    def faults(self) -> int:
        """How many requests a rule acted on."""
        return sum(rule.hits for rule in self.rules)

    def _take(self, kind: str) -> Rule | None:
        now = time.monotonic()
        with self._lock:
            if self.limit is not None and len(self.answered) >= self.limit:
                return Rule(kind, status=503)
            for rule in self.rules:
                if rule.matches(kind, now):
                    rule.hits += 1
                    return rule
        return None

    def _record(self, kind: str, status: int) -> None:
        with self._lock:
            self.answered.append((kind, status))


def _kind(path: str) -> str:
    split = urlsplit(path)
    # Path-style S3: /bucket?list-type=2... lists, /bucket/key reads an object.
    return "listing" if "list-type" in split.query or split.path.strip("/").count("/") == 0 else "object"


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    upstream = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        def _reset(self) -> None:
            # Closed with a zero linger: the client reads a TCP reset, not an orderly end of the answer.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
            self.close_connection = True

        def _forward(self) -> None:
            kind = _kind(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            rule = proxy._take(kind)
            if rule and rule.stall_s:
                # Nothing comes back: the client gives up on its timeout, or meets the connection closed.
                time.sleep(max(0.0, rule.stall(time.monotonic())))
                self.close_connection = True
                proxy._record(kind, 0)
                return
            if rule and rule.reset:
                self._reset()
                proxy._record(kind, 0)
                return
            if rule and rule.status:
                code = _CODES.get(rule.status, "InjectedFault")
                error = f"<Error><Code>{code}</Code><Message>injected {rule.status}</Message></Error>"
                self._answer(rule.status, [("Content-Type", "application/xml")], error.encode())
                proxy._record(kind, rule.status)
                return
            connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            finally:
                connection.close()
            # Before the client hears the answer: whatever it does next already meets the changed server.
            if rule and rule.after:
                rule.after()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _NOT_FORWARDED]
            self._answer(response.status, kept, data)
            proxy._record(kind, response.status)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    return Handler


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    # Readers open many connections at once; a short backlog drops SYNs, costing a second each.
    request_queue_size = 256

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gave up (its timeout, a stall) drops its kept-alive connection: no fault of the proxy's.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def start_proxy(upstream: str, limit: int | None = MAX_REQUESTS) -> tuple[FaultProxy, ProxyServer]:
    """A proxy in front of ``upstream`` on a free loopback port, answering at most ``limit`` requests (None: no
    bound), serving from a daemon thread."""
    proxy = FaultProxy(upstream, limit)
    server = ProxyServer(("127.0.0.1", 0), _handler(proxy))
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proxy, server
