"""What both policies hold a response's body to: sent as it is (nothing compressed, whose size
could not be capped as it is read), and read up to a cap, counted as it is read so that a stream
(server-sent events) still flows."""

from collections.abc import AsyncIterator, Callable, Iterator

import httpx2

# Sent with every request: Loop reads only bodies whose size it can cap as they come.
NOTHING_COMPRESSED = {"Accept-Encoding": "identity"}

# What a body that went past its cap is refused with, given the cap in bytes.
TooLarge = Callable[[int], Exception]


def content_coding(response: httpx2.Response) -> str | None:
    """The response's content coding, None when its body is sent as is."""
    coding = response.headers.get("Content-Encoding", "identity").strip().lower()
    return None if coding in ("identity", "") else coding


class Counter:
    """The bytes of one response body read so far, refused past the cap."""

    def __init__(self, limit: int, too_large: TooLarge) -> None:
        self._limit = limit
        self._too_large = too_large
        self._read = 0

    def add(self, chunk: bytes) -> bytes:
        self._read += len(chunk)
        if self._read > self._limit:
            raise self._too_large(self._limit)
        return chunk


class CappedSyncStream(httpx2.SyncByteStream):
    """A body that ends its reading once it passes its cap."""

    def __init__(self, stream: httpx2.SyncByteStream, limit: int, too_large: TooLarge) -> None:
        self._stream = stream
        self._counter = Counter(limit, too_large)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            yield self._counter.add(chunk)

    def close(self) -> None:
        self._stream.close()


class CappedAsyncStream(httpx2.AsyncByteStream):
    """The asynchronous twin of CappedSyncStream."""

    def __init__(self, stream: httpx2.AsyncByteStream, limit: int, too_large: TooLarge) -> None:
        self._stream = stream
        self._counter = Counter(limit, too_large)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield self._counter.add(chunk)

    async def aclose(self) -> None:
        await self._stream.aclose()
