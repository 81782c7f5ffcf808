"""An HTTP proxy on loopback in front of the S3-compatible test server, which injects faults by rule.

A rule matches requests (object listings or object reads) and, for its first ``times`` matches, answers with
an error status, stalls past the client's timeout, or changes the server (``after``) between reading the real
answer and passing it on.
Everything else is forwarded unchanged. The proxy is bounded: it answers at most ``MAX_REQUESTS`` and never
stalls longer than ``MAX_STALL_S``, so a client that retries forever cannot hang the test suite.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MAX_REQUESTS = 5_000
MAX_STALL_S = 10.0
# Hop-by-hop and length headers are the proxy's own business, not the upstream's.
_NOT_FORWARDED = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Rule:
    """One fault: which requests (``listing`` or ``object``), what happens, and for how many of them."""

    kind: str
    times: int
    status: int | None = None
    stall_s: float = 0.0
    after: Callable[[], None] | None = None
    hits: int = 0


@dataclass
class FaultProxy:
    """The proxy's endpoint, its rules, and every request it answered as (kind, status)."""

    upstream: str
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
        with self._lock:
            if len(self.answered) >= MAX_REQUESTS:
                return Rule(kind, 1, status=503)
            for rule in self.rules:
                if rule.kind == kind and rule.hits < rule.times:
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

        def _forward(self) -> None:
            kind = _kind(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            rule = proxy._take(kind)
            if rule and rule.stall_s:
                # Past the client's timeout: it gives up on this request before any byte comes back.
                time.sleep(min(rule.stall_s, MAX_STALL_S))
                self.close_connection = True
                proxy._record(kind, 0)
                return
            if rule and rule.status:
                error = f"<Error><Code>InjectedFault</Code><Message>injected {rule.status}</Message></Error>"
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


def start_proxy(upstream: str) -> tuple[FaultProxy, ProxyServer]:
    """A proxy in front of ``upstream`` on a free loopback port, serving from a daemon thread."""
    proxy = FaultProxy(upstream)
    server = ProxyServer(("127.0.0.1", 0), _handler(proxy))
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proxy, server
