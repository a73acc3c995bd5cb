"""Metrics and traces switched on for a bench: in this process (the persisted step of
bench/loop.py), or in a site's environment (bench/load.py's stack), traces going to a local
OTLP/HTTP sink that takes every export and keeps nothing, as a collector on the same host would."""

import contextlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (bench/load.py uses the sink without Django set up)
    from agent.observers import Observer


class Sink(BaseHTTPRequestHandler):
    """Reads an export whole and answers it as a collector does (an empty success)."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    """A local OTLP/HTTP endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def site_environment(var_dir: Path, endpoint: str) -> dict[str, str]:
    """What turns both on for a whole site: a scrape token, the processes' counters' directory,
    an OTLP endpoint (and its batches sent every second, so a bench of a minute exports)."""
    return {
        "LOOP_METRICS_TOKEN": "bench-metrics-token",
        "PROMETHEUS_MULTIPROC_DIR": str(var_dir / "metrics"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "1000",
    }


def in_this_process(directory: Path, endpoint: str) -> list["Observer"]:
    """Both switched on here as a site's process does it at start (metrics.apps, tracing.apps),
    the observers they sign up returned, for the bench to take off and put back between rounds."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "1000"
    from metrics.multiprocess import count_in

    count_in(directory)
    from metrics.heard import heard
    from tracing.apps import start_tracing

    return [heard, start_tracing()]
