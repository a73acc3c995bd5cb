"""The bounded policy: the HTTP client every model server is asked through, with what httpx2's own
lacks against a hostile or broken server: no redirect off the server's origin, nothing
compressed, and a cap on a body read whole (netguard.bodies). Nothing of the environment but
httpx2's own (proxies, certificates) reaches it: no vendor's settings, no developer's headers.

What it refuses is raised out of the request as the caller's `Refusals` word it (the model
clients: an LLMError naming the server and the setting to change)."""

from collections.abc import Mapping
from typing import Protocol

import httpx2

from netguard.bodies import NOTHING_COMPRESSED, CappedSyncStream, content_coding
from netguard.trust import trust_roots

MAX_BODY_BYTES = 32 * 2**20

# What Loop says it is, to a server's logs.
USER_AGENT = "Loop"


class Refusals(Protocol):
    """How a caller words what the policy refuses, as the exception its request raises."""

    def redirect(self, status: int, location: str) -> Exception:
        """A redirect off the server's scheme, host and port (`location` as the server sent it)."""
        ...

    def compressed(self, coding: str) -> Exception:
        """A body sent compressed though nothing compressed was asked for."""
        ...

    def too_large(self, limit: int) -> Exception:
        """A body read whole that went past `limit` bytes."""
        ...


def bounded_http_client(
    base_url: str, *, headers: Mapping[str, str], timeout: float, refusals: Refusals
) -> httpx2.Client:
    """The HTTP client for one model server at `base_url` (relative paths are joined to its
    path, as an OpenAI-compatible base URL ending in /v1 has it). Redirects to another origin
    are not followed (a 307 would carry the conversation and the key, a 302 fetch a URL on the
    worker's network such as a cloud's metadata service, whose answer an error would show),
    nothing compressed is asked for or taken (a small gzip body can inflate to gigabytes), and a
    body read whole is cut at MAX_BODY_BYTES."""
    return httpx2.Client(
        base_url=base_url,
        headers={**headers, **NOTHING_COMPRESSED, "User-Agent": USER_AGENT},
        timeout=timeout,
        verify=trust_roots(),  # those the environment names, loaded once a process
        follow_redirects=True,  # within the server's own origin: the guard refuses the others
        event_hooks={"response": [ResponseGuard(refusals)]},
    )


class ResponseGuard:
    """httpx2's response hook: runs once a response's headers are in, before the client reads
    it. What it refuses is raised as the caller's refusal, out of the request."""

    def __init__(self, refusals: Refusals) -> None:
        self.refusals = refusals

    def __call__(self, response: httpx2.Response) -> None:
        if response.has_redirect_location and not self._same_origin(response):
            response.close()
            location = response.headers.get("location", "")
            raise self.refusals.redirect(response.status_code, location)
        coding = content_coding(response)
        if coding is not None:
            response.close()
            raise self.refusals.compressed(coding)
        stream = response.stream  # a sync client's: always a SyncByteStream
        if "text/event-stream" not in response.headers.get("content-type", "") and isinstance(
            stream, httpx2.SyncByteStream
        ):
            # A stream is bounded as it is read, line by line and reply by reply.
            response.stream = CappedSyncStream(stream, MAX_BODY_BYTES, self.refusals.too_large)

    @staticmethod
    def _same_origin(response: httpx2.Response) -> bool:
        """Whether a redirect stays on the server's scheme, host and port."""
        try:
            target = response.url.join(response.headers["location"])
        except Exception:  # a Location httpx2 cannot read is not followed
            return False
        return bool(target.scheme == response.url.scheme and target.netloc == response.url.netloc)
