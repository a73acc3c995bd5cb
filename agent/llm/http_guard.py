"""The one HTTP client every model server is asked through (plain httpx), with what httpx's own
lacks against a hostile or broken server: no redirect off the server's origin, nothing
compressed, and a bound on a body read whole. Nothing of the environment but httpx's own
(proxies, certificates) reaches it: no vendor's settings, no developer's headers."""

from collections.abc import Iterator, Mapping

import httpx

from agent.llm.said import clipped, scrubbed_url, sentence
from core.llm import LLMError

MAX_BODY_BYTES = 32 * 2**20

# What Loop says it is, to a server's logs.
USER_AGENT = "Loop"


def bounded_http_client(
    base_url: str,
    *,
    headers: Mapping[str, str],
    timeout: float,
    server: str,
    base_url_setting: str,
) -> httpx.Client:
    """The HTTP client for one model server at `base_url` (relative paths are joined to its
    path, as an OpenAI-compatible base URL ending in /v1 has it). Redirects to another origin
    are not followed (a 307 would carry the conversation and the key, a 302 fetch a URL on the
    worker's network such as a cloud's metadata service, whose answer an error would show),
    nothing compressed is asked for or taken (a small gzip body can inflate to gigabytes), and a
    body read whole is cut at MAX_BODY_BYTES."""
    return httpx.Client(
        base_url=base_url,
        headers={
            **headers,
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
        },
        timeout=timeout,
        follow_redirects=True,  # within the server's own origin: the guard refuses the others
        event_hooks={"response": [ResponseGuard(server, base_url_setting)]},
    )


class ResponseGuard:
    """httpx's response hook: runs once a response's headers are in, before the client reads
    it. What it refuses is an LLMError, raised as itself out of the request."""

    def __init__(self, server: str, base_url_setting: str) -> None:
        self.server = server
        self.base_url_setting = base_url_setting

    def __call__(self, response: httpx.Response) -> None:
        if response.has_redirect_location and not self._same_origin(response):
            response.close()
            location = scrubbed_url(response.headers.get("location", ""))
            raise LLMError(
                f"{sentence(self.server)} answered {response.status_code} with a redirect to "
                f"{clipped(location)}; Loop follows a model server's redirects only within its "
                "own scheme, host and port. Set "
                f"{self.base_url_setting} to the URL the server means.",
                status=response.status_code,
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in {"", "identity"}:
            response.close()
            raise LLMError(
                f"{sentence(self.server)} sent a compressed reply ({clipped(encoding)}) it was "
                "not asked for; Loop does not inflate one."
            )
        stream = response.stream  # a sync client's: always a SyncByteStream
        if "text/event-stream" not in response.headers.get("content-type", "") and isinstance(
            stream, httpx.SyncByteStream
        ):
            # A stream is bounded as it is read, line by line and reply by reply.
            response.stream = BoundedBody(stream, self.server)

    @staticmethod
    def _same_origin(response: httpx.Response) -> bool:
        """Whether a redirect stays on the server's scheme, host and port."""
        try:
            target = response.url.join(response.headers["location"])
        except Exception:  # a Location httpx cannot read is not followed
            return False
        return bool(target.scheme == response.url.scheme and target.netloc == response.url.netloc)


class BoundedBody(httpx.SyncByteStream):
    """A response body that ends the turn once it passes MAX_BODY_BYTES."""

    def __init__(self, stream: httpx.SyncByteStream, server: str) -> None:
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
