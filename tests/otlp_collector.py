"""An OTLP/HTTP trace collector in the test's process: it takes what the SDK's exporter POSTs to
/v1/traces (protobuf ExportTraceServiceRequest), as a real collector would, and keeps the spans."""

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root
    kind: int
    attributes: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]]  # (trace id, span id, attributes)
    status_code: int  # 0 unset, 1 ok, 2 error
    start: int
    end: int
    resource: dict[str, Any]
    scope: str
    schema_url: str


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    return None if kind is None else getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs}


class Collector:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = [
            ReceivedSpan(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(),
                kind=span.kind,
                attributes=attributes_of(span.attributes),
                links=[
                    (link.trace_id.hex(), link.span_id.hex(), attributes_of(link.attributes))
                    for link in span.links
                ],
                status_code=span.status.code,
                start=span.start_time_unix_nano,
                end=span.end_time_unix_nano,
                resource=attributes_of(resource_spans.resource.attributes),
                scope=scope_spans.scope.name,
                schema_url=scope_spans.schema_url,
            )
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self.lock:
            self.spans += spans

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.name.startswith(prefix)]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                collector.received(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def running_collector() -> Iterator[Collector]:
    collector = Collector()
    thread = threading.Thread(target=collector.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collector
    finally:
        collector.server.shutdown()
        collector.server.server_close()
