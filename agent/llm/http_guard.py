"""The HTTP client under both SDKs, with what their own lacks against a hostile or broken server:
no redirect off the server's origin, nothing compressed, and a bound on a body read whole."""

import functools
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from agent.core.llm import LLMError
from agent.llm.chat_completions import Dialect
from agent.llm.said import clipped, scrubbed_url, sentence

MAX_BODY_BYTES = 32 * 2**20


def bounded_http_client(dialect: Dialect, server: str) -> Any:
    """The HTTP client for a dialect's SDK, with what the SDK's own lacks against a hostile or
    broken server: redirects to another origin are not followed (the SDK follows them, and a
    307 would carry the conversation, or a 302 fetch a URL on the worker's network such as a
    cloud's metadata service, whose answer the error would show), nothing compressed is asked
    for or taken (a small gzip body can inflate to gigabytes), and a body read whole is cut at
    MAX_BODY_BYTES."""
    guard = ResponseGuard(dialect, server)
    return dialect.sdk.DefaultHttpxClient(
        follow_redirects=True,  # within the server's own origin: the guard refuses the others
        headers={"Accept-Encoding": "identity"},
        event_hooks={"response": [guard]},
    )


class ResponseGuard:
    """httpx's response hook: runs once a response's headers are in, before the SDK reads it.
    What it refuses is an LLMError (the SDK wraps it; `_own_errors` unwraps it)."""

    def __init__(self, dialect: Dialect, server: str) -> None:
        self.dialect = dialect
        self.server = server
        self.body_class = _bounded_body_class(dialect.http)

    def __call__(self, response: Any) -> None:
        if response.has_redirect_location and not self._same_origin(response):
            response.close()
            location = scrubbed_url(response.headers.get("location", ""))
            raise LLMError(
                f"{sentence(self.server)} answered {response.status_code} with a redirect to "
                f"{clipped(location)}; Loop follows a model server's redirects only within its "
                "own scheme, host and port. Set "
                f"{self.dialect.base_url_setting} to the URL the server means.",
                status=response.status_code,
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in {"", "identity"}:
            response.close()
            raise LLMError(
                f"{sentence(self.server)} sent a compressed reply ({clipped(encoding)}) it was "
                "not asked for; Loop does not inflate one."
            )
        if "text/event-stream" not in response.headers.get("content-type", ""):
            # A stream is bounded as it is read, line by line and reply by reply.
            response.stream = self.body_class(response.stream, self.server)

    @staticmethod
    def _same_origin(response: Any) -> bool:
        """Whether a redirect stays on the server's scheme, host and port."""
        try:
            target = response.url.join(response.headers["location"])
        except Exception:  # a Location httpx cannot read is not followed
            return False
        return bool(target.scheme == response.url.scheme and target.netloc == response.url.netloc)


@functools.cache
def _bounded_body_class(http: ModuleType) -> type:
    """The bounded body for an HTTP library (httpx or httpx2): a stream of its own kind."""

    class BoundedBody(http.SyncByteStream):  # type: ignore[name-defined,misc]
        """A response body that ends the turn once it passes MAX_BODY_BYTES."""

        def __init__(self, stream: Any, server: str) -> None:
            self.stream = stream
            self.server = server

        def __iter__(self) -> Iterator[bytes]:
            read = 0
            for piece in self.stream:
                read += len(piece)
                if read > MAX_BODY_BYTES:
                    raise LLMError(
                        f"{sentence(self.server)} sent more than {MAX_BODY_BYTES // 2**20} MiB "
                        "in one answer; Loop read no more of it."
                    )
                yield piece

        def close(self) -> None:
            self.stream.close()

    return BoundedBody
