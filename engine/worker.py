"""The worker process: Procrastinate's worker working LOOP_WORKER_CONCURRENCY runs at once, kept
up through database outages and stopped by handing its runs back; and the supervisor that starts
it again whenever it dies (`make run`). docs/engine.md tells the whole story.

The supervisor half is engine.supervise's, standard library only, and runs as `python -m
engine.worker` (`manage.py worker --supervise` becomes it), so the parent holds no Django, no
model, no pool.
The worker half imports Django and Procrastinate inside the functions that need them.
"""

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.supervise import STOP_SIGNALS, Backoff, supervise, wait_at_most

if TYPE_CHECKING:
    from procrastinate import PsycopgConnector

    from sandbox.host import SandboxHost

logger = logging.getLogger(__name__)

PROJECT_DIR = Path(__file__).resolve().parent.parent

# Threads beyond one per run: the recovery and the runs' own sync_to_async calls share the pool.
SPARE_THREADS = 4
# NOTIFY hands a new job over at once; the poll bounds a miss: Procrastinate clears its "new job"
# flag after each fetch, so a notification that lands while a fetch is in flight is lost with it.
FETCH_POLL_SECONDS = 1.0
# Stop requests come by NOTIFY too; the poll covers one sent while the listener reconnected.
ABORT_POLL_SECONDS = 1.0
# A stopping worker gives its runs this long to hand back (honcho's SIGKILL comes at 5 s; the
# runs hand back in well under a second), then leaves them to the stale-worker recovery.
HAND_BACK_SECONDS = 9.0
# A database that does not answer a connection in this long is away for now.
CONNECT_SECONDS = 10
# The most any of Procrastinate's queries waits for a free connection of its pool (a few ms when
# the database is up; when it is gone, the worker stops trying and connects again).
POOL_WAIT_SECONDS = 5.0
# Waits between tries while the database is away.
RECONNECT_FIRST, RECONNECT_LONGEST = 1.0, 10.0


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int
    name: str
    stale_seconds: float


# The worker ----------------------------------------------------------------------------------


def serve(config: WorkerConfig) -> None:
    """Work runs until SIGTERM or SIGINT, then hand the running ones back. The database going
    away is waited out, never a reason to exit."""
    asyncio.run(_serve(config))


async def _serve(config: WorkerConfig) -> None:
    loop = asyncio.get_running_loop()
    # Procrastinate runs each sync job through asgiref's sync_to_async(thread_sensitive=False),
    # that is in the loop's default executor, which Python sizes to min(32, cores + 4): without
    # this, `--concurrency 16` on two cores would work 6 runs at once.
    loop.set_default_executor(
        ThreadPoolExecutor(config.concurrency + SPARE_THREADS, thread_name_prefix="run")
    )
    stop = StopRequest(loop, config.name)
    dropped = DatabaseErrorsInOneLine.install(config.name)
    with worker_sandboxes() as sandbox:
        await serve_until_stopped(config, stop, dropped, sandbox)
    logger.info("Worker %s stopped", config.name)


@contextmanager
def worker_sandboxes() -> "Iterator[SandboxHost]":
    """The sandboxes this worker's runs run snippets in, all its lives long; closed as it stops
    (those started ahead killed, its launcher and reaper ended, cgroups left behind removed)."""
    from sandbox.host import SandboxHost

    with SandboxHost() as sandbox:
        yield sandbox


async def serve_until_stopped(
    config: WorkerConfig,
    stop: "StopRequest",
    dropped: "DatabaseErrorsInOneLine",
    sandbox: "SandboxHost",
) -> None:
    """Live again and again, each life until the database goes away, until a stop is asked."""
    loop = asyncio.get_running_loop()
    backoff = Backoff(RECONNECT_FIRST, RECONNECT_LONGEST)
    while not stop.is_set():
        began = loop.time()
        failure: Exception | None = None
        try:
            await until_stopped(work(config, sandbox), stop)
        except Exception as error:  # whatever it was, the worker starts again
            failure = error
        first_dropped = dropped.take()
        if stop.is_set():
            break
        ended = describe_failure(first_dropped or failure)
        delay = backoff.after(loop.time() - began)
        logger.warning("Worker %s: %s; starting again in %.0f s", config.name, ended, delay)
        await stop.wait(delay)


async def work(config: WorkerConfig, sandbox: "SandboxHost") -> None:
    """One life of the worker: connect, then work jobs until stopped (cancelled) or until
    Procrastinate gives up on the database. Three Procrastinate workers share this process: the
    runs' one at full concurrency, a one-slot one for the recovery, so that the recovery runs
    even while every run slot is taken, and a few slots for mail and webhooks. The runs' jobs get
    the worker's `sandbox`."""
    from procrastinate.contrib.django import app

    from agent.queue import NOTIFY_CONCURRENCY, NOTIFY_QUEUE, RECOVERY_QUEUE, RUNS_QUEUE
    from engine.tasks import SANDBOX

    connector = await worker_connector()
    await warm_up(config)
    await reclaim_from_dead_workers(config)
    with app.replace_connector(connector):
        async with app.open_async():
            logger.info("Worker %s: working up to %d runs at once", config.name, config.concurrency)
            await first_to_end(
                app.run_worker_async(
                    **worker_options(config),
                    queues=[RUNS_QUEUE],
                    name=config.name,
                    concurrency=config.concurrency,
                    additional_context={SANDBOX: sandbox},
                ),
                app.run_worker_async(
                    **worker_options(config),
                    queues=[RECOVERY_QUEUE],
                    name=recovery_name(config.name),
                    concurrency=1,
                ),
                app.run_worker_async(
                    **worker_options(config),
                    queues=[NOTIFY_QUEUE],
                    name=f"{config.name} notify",
                    concurrency=NOTIFY_CONCURRENCY,
                ),
            )


async def warm_up(config: WorkerConfig) -> None:
    """Before taking any job, load what a run's first steps need (engine/warm.py): the first run
    after a start shows its first card as soon as any other. In a thread: it is synchronous."""
    from engine.warm import warm_up as load

    seconds = await asyncio.to_thread(load)
    logger.info(
        "Worker %s: warmed up (the embedder, the tools' specs, the run's modules) in %.2f s",
        config.name,
        seconds,
    )


async def reclaim_from_dead_workers(config: WorkerConfig) -> None:
    """Before taking any job (so none of this process's own can be among them), give a new job
    to each run a dead worker of this host left `running`: a worker started again after a
    `kill -9` takes its predecessor's runs back at once instead of after LOOP_STALE_SECONDS
    (engine/tasks.py). Done at each life's start, in a thread: it is synchronous, on Django's
    connection."""
    from engine.tasks import reclaim_as_a_worker_starts

    reclaimed = await asyncio.to_thread(reclaim_as_a_worker_starts)
    if reclaimed:
        logger.info(
            "Worker %s: took back %d run(s) of a dead worker of this host", config.name, reclaimed
        )


async def worker_connector() -> "PsycopgConnector":
    """The connector a worker needs (the Django one cannot LISTEN): what
    `app.connector.get_worker_connector()` makes, a psycopg pool on Django's database, but
    waiting at most POOL_WAIT_SECONDS for a connection, so that a worker whose database went away
    winds down in seconds rather than in psycopg's 30. Made afresh for each life, after one
    plain connection has got through: reading the settings starts the embedded PostgreSQL again
    if it went away, and the try fails at once, where opening a pool would wait 30 s."""
    import psycopg
    from procrastinate import PsycopgConnector
    from procrastinate.contrib.django import connector_params

    params = await asyncio.to_thread(connector_params)
    connection = await psycopg.AsyncConnection.connect(
        **{"connect_timeout": CONNECT_SECONDS, **params}
    )
    await connection.close()
    return PsycopgConnector(kwargs=params, timeout=POOL_WAIT_SECONDS)


def worker_options(config: WorkerConfig) -> dict[str, Any]:
    return {
        "listen_notify": True,
        "fetch_job_polling_interval": FETCH_POLL_SECONDS,
        "abort_job_polling_interval": ABORT_POLL_SECONDS,
        # Liveness: a heartbeat three times per stale period, from the event loop, whatever the
        # runs are doing; a worker silent for LOOP_STALE_SECONDS is dead and its runs resumed.
        "update_heartbeat_interval": config.stale_seconds / 3,
        "stalled_worker_timeout": config.stale_seconds,
        "delete_jobs": "successful",
        # At a stop no run is waited for: each is told at once (AbortReason.SHUTDOWN), hands
        # back, and its job is retried by whichever worker is next.
        "shutdown_graceful_timeout": 0,
        # Our StopRequest handles the signals (it must also end a wait for the database).
        "install_signal_handlers": False,
    }


def recovery_name(name: str) -> str:
    return f"{name} recovery"


async def first_to_end(*coroutines: Coroutine[Any, Any, None]) -> None:
    """Run the coroutines together until one ends (or this is cancelled); then stop the others
    and wait for them. A failure of any of them is raised."""
    tasks = [asyncio.create_task(coroutine) for coroutine in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome


async def until_stopped(coroutine: Coroutine[Any, Any, None], stop: "StopRequest") -> None:
    """Run `coroutine` until it ends or a stop is requested; then cancel it (Procrastinate's
    worker takes a cancel as its stop: no new job, the running ones told to hand back) and wait
    until it has wound down."""
    task = asyncio.create_task(coroutine)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


class StopRequest:
    """SIGTERM or SIGINT: the first asks the worker to stop (and starts the hand-back deadline);
    any later one is only acknowledged, so a second Ctrl-C is never a traceback."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self.name = name
        self._event = asyncio.Event()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self._received, signum)

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None = None) -> None:
        await wait_at_most(self._event.wait(), timeout)

    def _received(self, signum: int) -> None:
        signame = signal.Signals(signum).name
        if self._event.is_set():
            logger.info("Worker %s: %s again; still handing back its runs", self.name, signame)
            return
        logger.info(
            "Worker %s: %s; taking no new runs, handing back the running ones", self.name, signame
        )
        self._event.set()
        deadline = threading.Timer(HAND_BACK_SECONDS, self._give_up)
        deadline.daemon = True
        deadline.start()

    def _give_up(self) -> None:
        logger.error(
            "Worker %s: its runs did not hand back within %.0f s; exiting (a live worker resumes "
            "them once this one's heartbeat is stale)",
            self.name,
            HAND_BACK_SECONDS,
        )
        logging.shutdown()
        os._exit(1)


def is_database_error(error: BaseException | None) -> bool:
    """Whether `error`, or what caused it, says the database could not be reached or went away."""
    import psycopg
    import psycopg_pool
    from django import db
    from procrastinate.exceptions import ConnectorException

    kinds = (
        ConnectorException,
        psycopg.OperationalError,
        psycopg.InterfaceError,
        psycopg_pool.PoolTimeout,
        db.OperationalError,
        db.InterfaceError,
        OSError,
    )
    return any(isinstance(each, kinds) for each in chain(error))


def chain(error: BaseException | None) -> list[BaseException]:
    """`error` and what caused it, in turn, down to the first cause."""
    found: list[BaseException] = []
    while error is not None and error not in found:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def describe_failure(error: BaseException | None) -> str:
    """One line for the log: the database's own words when it is the database."""
    if error is None:
        return "it stopped by itself (see the error above)"
    if not is_database_error(error):
        logger.error("The worker failed", exc_info=error)
        return f"it failed ({type(error).__name__})"
    root = chain(error)[-1]
    words = str(root).strip().splitlines()
    return f"the database is unreachable ({words[0] if words else type(root).__name__})"


class DatabaseErrorsInOneLine(logging.Filter):
    """While the database is away, Procrastinate logs each of its side tasks failing (listener,
    heartbeat, abort poll) with a traceback, and psycopg's pool each failed connection; the
    worker says it once, in one line (`describe_failure`), so those records are dropped. The
    first one dropped is kept: it says best what happened."""

    LOGGERS = ("procrastinate.manager", "procrastinate.periodic", "procrastinate.utils")

    def __init__(self) -> None:
        super().__init__()
        self.first: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not is_database_error(error):
            return True
        self.first = self.first or error
        return False

    def take(self) -> BaseException | None:
        first, self.first = self.first, None
        return first

    @classmethod
    def install(cls, name: str) -> "DatabaseErrorsInOneLine":
        one = cls()
        worker = logging.getLogger("procrastinate.worker")
        loggers = [logging.getLogger(each) for each in cls.LOGGERS]
        loggers += [worker, worker.getChild(name), worker.getChild(recovery_name(name))]
        for each in loggers:
            each.addFilter(one)
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        return one


# The supervisor ------------------------------------------------------------------------------


def become_supervisor(worker_arguments: list[str]) -> None:
    """Replace this process (same pid, so honcho still tracks it) with the supervisor, which
    starts `manage.py worker WORKER_ARGUMENTS` and keeps it up."""
    os.chdir(PROJECT_DIR)
    os.execv(sys.executable, [sys.executable, "-m", "engine.worker", *worker_arguments])  # noqa: S606


def worker_command(arguments: list[str]) -> list[str]:
    return [sys.executable, str(PROJECT_DIR / "manage.py"), "worker", *arguments]


def main(arguments: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return supervise(worker_command(arguments), "The worker")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
