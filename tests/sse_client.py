"""A Server-Sent Events client over the stdlib's http.client, as a program reads Loop's API
streams: messages parsed as the SSE spec says (id, event, data lines; a comment line), read as
they come, and a connection the test can drop mid-stream."""

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

WAIT = 60  # seconds: a bound that turns a hang into a failure, not a timing assertion


@dataclass(frozen=True)
class Sse:
    id: str | None
    event: str | None
    data: str | None
    comment: str | None = None

    def json(self) -> Any:
        assert self.data is not None, self
        return json.loads(self.data)


class Stream:
    """One open stream; `messages()` yields each message (and each comment) as it arrives,
    and ends when the server closes the stream."""

    def __init__(self, port: int, path: str, key: str, **headers: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        sent = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream", **headers}
        self.connection.request("GET", path, headers=sent)
        self.response = self.connection.getresponse()

    @classmethod
    def posted(cls, port: int, path: str, key: str, body: dict[str, Any]) -> "Stream":
        stream = cls.__new__(cls)
        stream.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        stream.connection.request("POST", path, body=json.dumps(body), headers=headers)
        stream.response = stream.connection.getresponse()
        return stream

    @property
    def status(self) -> int:
        return self.response.status

    def header(self, name: str) -> str | None:
        return self.response.getheader(name)

    def body(self) -> Any:
        return json.loads(self.response.read())

    def messages(self) -> Iterator[Sse]:
        fields: dict[str, str] = {}
        while True:
            raw = self.response.readline()
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            if not line:
                if fields:
                    yield Sse(fields.get("id"), fields.get("event"), fields.get("data"))
                fields = {}
            elif line.startswith(":"):
                yield Sse(None, None, None, comment=line[1:].strip())
            else:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                joined = name == "data" and name in fields
                fields[name] = f"{fields[name]}\n{value}" if joined else value

    def close(self) -> None:
        self.connection.close()
