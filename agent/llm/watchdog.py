"""A model turn's wall-clock bound: the reply's connection is cut when the run's time is up.

httpx2's timeouts bound each read, not a whole reply, so a server that sends a piece now and then
could hold a turn for as long as it likes; the watchdog cuts the reply at the deadline however
slowly it trickles in.
"""

import logging
import socket
import threading
import time
from types import TracebackType

import httpx2

logger = logging.getLogger(__name__)


class Watchdog:
    """Use as a context manager around one attempt; `watch` the response once its headers are in.

    At the deadline the response's socket is shut down, which wakes the thread blocked reading it
    (closing the socket from another thread would not). `fired` says whether that happened.
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.fired = threading.Event()
        self.timer: threading.Timer | None = None

    def watch(self, response: httpx2.Response) -> None:
        if self.deadline is None:
            return
        left = max(self.deadline - time.monotonic(), 0.0)
        self.timer = threading.Timer(left, self.cut, args=(response,))
        self.timer.name = "model-turn-watchdog"
        self.timer.daemon = True
        self.timer.start()

    def cut(self, response: httpx2.Response) -> None:
        self.fired.set()
        stream = response.extensions.get("network_stream")
        connection = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(connection, socket.socket):
            # No socket to shut down (not HTTP/1.1 over TCP): closing may not wake a blocked
            # read at once, but the next one fails.
            response.close()
            return
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError as error:  # the reply ended and its connection closed meanwhile
            logger.debug("The watchdog found the connection already closed: %s", error)

    def __enter__(self) -> "Watchdog":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.timer is not None:
            self.timer.cancel()
