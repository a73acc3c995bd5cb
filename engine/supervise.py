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
# The first restart after a healthy spell is at once: a worker killed under `make run` has its
# runs resumed by the next one as it starts (it takes back its predecessor's runs by pid), so a
# second of waiting here is a second added to every run it held. Dying again, it waits 1 s, 2 s…
RESTART_FIRST, RESTART_LONGEST = 1.0, 30.0
# A process that ran this long before it ended is not "dying over and over": wait the least again.
HEALTHY_SECONDS = 60.0


class Backoff:
    """Waits that double from `first` up to `longest`, and start over after a healthy spell;
    with `at_once`, the first try after a healthy spell (or the very first) waits nothing."""

    def __init__(self, first: float, longest: float, *, at_once: bool = False) -> None:
        self.first, self.longest, self.at_once = first, longest, at_once
        self.delay = 0.0 if at_once else first

    def after(self, lasted: float) -> float:
        """The wait before the next try, given how long the last one lasted."""
        if lasted >= HEALTHY_SECONDS:
            self.delay = 0.0 if self.at_once else self.first
        delay = self.delay
        self.delay = min(self.delay * 2, self.longest) if self.delay else self.first
        return delay


def supervise(command: list[str], name: str) -> int:
    """Run `command` as a child and start it again whenever it exits other than because we
    asked it to stop: at once, then after 1 s, doubling to 30 s while it keeps dying within a
    minute. SIGTERM
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
    backoff = Backoff(RESTART_FIRST, RESTART_LONGEST, at_once=True)
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
            "%s (pid %s) %s; starting it again %s", name, child.pid, ended(status), when(delay)
        )
        await wait_at_most(stopping.wait(), delay)
    return 0


def when(delay: float) -> str:
    return f"in {delay:.0f} s" if delay else "at once"


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
