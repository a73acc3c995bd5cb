"""The keeper: stops the embedded PostgreSQL once no Loop process that uses it is alive.

A Loop process that exits leaves the record of the server's users, and the last one out stops
the server (server.py). A process that is SIGKILLed or OOM-killed cannot, and without the keeper
the server would outlive every Loop process. So whoever starts or joins the server makes sure a
keeper runs: a small process of its own session (a Ctrl-C or a kill of the process group does
not reach it) that checks the record every CHECK_SECONDS and, once no recorded process is alive,
stops the server and exits. It never stops a server a live Loop process still uses, and it takes
the same lock as a start, so it cannot stop a server that a process is joining.

One keeper per data directory: it holds the keeper lock for as long as it runs, and the kernel
releases that lock however it exits. Run as `python -m loopsite.embedded_postgres.keeper PGDATA`.
"""

import fcntl
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from loopsite.embedded_postgres import processes

CHECK_SECONDS = 2.0
PROJECT_DIR = Path(__file__).resolve().parents[2]

_started: list[subprocess.Popen[bytes]] = []  # kept, so they are never collected while running


def log_path(pgdata: Path) -> Path:
    return pgdata.parent / f"{pgdata.name}-keeper.log"


def running(pgdata: Path) -> bool:
    """Whether a keeper holds this data directory's keeper lock."""
    with processes.lock_path(pgdata, "keeper").open("a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def ensure(pgdata: Path) -> None:
    """Start a keeper for this data directory unless one runs. Hold processes.exclusive."""
    if running(pgdata):
        return
    with log_path(pgdata).open("ab") as log:
        _started.append(
            subprocess.Popen(  # noqa: S603 (our own interpreter and module, no shell)
                [sys.executable, "-m", "loopsite.embedded_postgres.keeper", str(pgdata)],
                cwd=PROJECT_DIR,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )


def keep(pgdata: Path) -> None:
    with processes.lock_path(pgdata, "keeper").open("a") as held:
        # Blocking: a second keeper started in a race waits, and finds nothing to do.
        fcntl.flock(held, fcntl.LOCK_EX)
        while not check(pgdata, held):
            time.sleep(CHECK_SECONDS)


def check(pgdata: Path, held: IO[str]) -> bool:
    """One look at the record; True when the keeper's work is done (no Loop process is left and
    the server is stopped)."""
    with processes.exclusive(pgdata):
        if processes.users(pgdata):
            return False
        if processes.postmaster(pgdata) is not None:
            say(f"no Loop process uses {pgdata} any more; stopping its server")
            try:
                processes.stop(pgdata)
            except subprocess.SubprocessError as error:
                say(f"stopping failed ({error}); trying again")
                return False
        # Let go before the data directory's lock: a process that joins next starts a keeper.
        fcntl.flock(held, fcntl.LOCK_UN)
        return True


def say(line: str) -> None:
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} keeper: {line}", flush=True)


if __name__ == "__main__":
    keep(Path(sys.argv[1]).resolve())
