"""A sandbox's output, read with a byte cap."""

import threading
from typing import IO


class CappedReader:
    """Drain a pipe to its end, keeping at most `cap` bytes, so a flood cannot fill our memory."""

    def __init__(self, pipe: IO[bytes] | None, cap: int) -> None:
        if pipe is None:
            raise ValueError("CappedReader needs a pipe (stdout=PIPE or stderr=PIPE).")
        self.pipe, self.cap = pipe, cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        with self.pipe:
            while chunk := self.pipe.read1(65536):  # type: ignore[attr-defined]
                room = self.cap - self.kept
                if len(chunk) > room:
                    self.truncated = True
                    chunk = chunk[:room]
                if chunk:
                    self.chunks.append(chunk)
                    self.kept += len(chunk)

    def join(self) -> None:
        self.thread.join()

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")
