"""Keeping a process up: run a command as a child and start it again whenever it dies. `make run`
runs both its processes so (honcho stops everything when any process exits): the web server
(`python -m engine.supervise daphne …` in the Procfile) and the worker (`manage.py worker
--supervise`). Standard library only, so the supervisor holds no Django, no model, no pool.
"""

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable
from contextlib import suppress
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Waits between restarts of a dying process.
RESTART_FIRST, RESTART_LONGEST = 1.0, 30.0
# A process that ran this long before it ended is not "dying over and over": wait the least again.
HEALTHY_SECONDS = 60.0


class Backoff:
    """Waits that double from `first` up to `longest`, and start over after a healthy spell."""

    def __init__(self, first: float, longest: float) -> None:
        self.first, self.longest = first, longest
        self.delay = first

    def after(self, lasted: float) -> float:
        """The wait before the next try, given how long the last one lasted."""
        if lasted >= HEALTHY_SECONDS:
            self.delay = self.first
        delay, self.delay = self.delay, min(self.delay * 2, self.longest)
        return delay


def supervise(command: list[str], name: str) -> int:
    """Run `command` as a child and start it again whenever it exits other than because we
    asked it to stop: after 1 s, doubling to 30 s while it keeps dying within a minute. SIGTERM
    and SIGINT are passed on to it and waited out. Returns the exit status. `name` says which
    process it is in the log."""
    return asyncio.run(_supervise(command, name))


async def _supervise(command: list[str], name: str) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    child: asyncio.subprocess.Process | None = None

    def pass_on(signum: int) -> None:
        stopping.set()
        if child is not None and child.returncode is None:
            child.send_signal(signum)

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, pass_on, signum)
    backoff = Backoff(RESTART_FIRST, RESTART_LONGEST)
    while not stopping.is_set():
        began = loop.time()
        child = await asyncio.create_subprocess_exec(*command)
        if stopping.is_set():  # the signal came while it was being started
            child.send_signal(signal.SIGTERM)
        status = await child.wait()
        if stopping.is_set():
            return max(status, 0)
        delay = backoff.after(loop.time() - began)
        logger.warning(
            "%s (pid %s) %s; starting it again in %.0f s", name, child.pid, ended(status), delay
        )
        await wait_at_most(stopping.wait(), delay)
    return 0


def ended(status: int) -> str:
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


async def wait_at_most(awaitable: Awaitable[Any], timeout: float | None) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(awaitable, timeout)


def main(command: list[str]) -> int:
    """`python -m engine.supervise COMMAND [ARGUMENTS…]`."""
    if not command:
        sys.exit("usage: python -m engine.supervise COMMAND [ARGUMENTS...]")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return supervise(command, f"The {Path(command[0]).name} process")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
