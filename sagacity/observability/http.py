"""The worker's HTTP endpoint: ``/metrics`` (Sagacity's and Temporal's), ``/healthz``, ``/readyz``.

A small threaded server from the standard library, so a scrape or a probe is answered even while
the worker's event loop is busy. ``/healthz`` says whether the process should be left running
(200) or restarted (503); ``/readyz`` whether it polls its task queue (200) or not yet / no
longer (503, during start-up and after SIGTERM). What each means is the caller's ``alive`` and
``ready``.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

__all__ = ["ProbeServer"]

log = logging.getLogger("sagacity.worker")


class ProbeServer:
    """Serve metrics and probes on ``address`` (``host:port``; port 0 picks a free one)."""

    def __init__(
        self,
        address: str,
        *,
        alive: Callable[[], bool],
        ready: Callable[[], bool],
        temporal_metrics: str | None = None,
        before_scrape: Callable[[], None] | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._alive = alive
        self._ready = ready
        self._temporal_metrics = temporal_metrics
        self._before_scrape = before_scrape
        self._server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sagacity-probes", daemon=True
        )

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("metrics and probes on http://%s (/metrics, /healthz, /readyz)", self.address)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def metrics(self) -> bytes:
        """Sagacity's registry, then the Temporal runtime's own exposition."""
        if self._before_scrape is not None:
            try:
                self._before_scrape()
            except Exception as exc:  # a stale gauge beats a failed scrape
                log.warning("metrics refresh failed: %s", exc)
        body = generate_latest(REGISTRY)
        if self._temporal_metrics:
            url = f"http://{self._temporal_metrics}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                body += response.read()
        return body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        probes = self

        class Handler(BaseHTTPRequestHandler):
            #: answering HEAD: GET's status and headers, no body
            head_only = False

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, probes.metrics(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok = probes._alive() if path == "/healthz" else probes._ready()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"not ok\n")
                else:
                    self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

            def do_HEAD(self) -> None:
                self.head_only = True
                self.do_GET()

            def _refuse_method(self) -> None:
                self._send(405, f"{self.command} is not allowed: GET only\n".encode())

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

            def _send(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if status == 405:
                    self.send_header("Allow", "GET, HEAD")
                self.end_headers()
                if not self.head_only:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the worker's own log

        return Handler
