"""Shared helpers: running manage.py in a separate process, as an operator or a worker would."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

PROJECT_DIR = Path(__file__).resolve().parent.parent

# Variables that would leak the caller's configuration into a child process under test.
_CONFIG_VARIABLES = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL")


# Where LOOP_SANDBOX_UID_BASE is set, each xdist worker's range starts this far above the last:
# users per test database stay far below it.
XDIST_UID_STRIDE = 2**20

# libpq names the child processes' database sessions by this, so a test can wait for them to go.
CHILD_APPLICATION_NAME = "loop-test-child"


def pytest_configure(config: pytest.Config) -> None:
    quick_password_hashes()
    workers_apart()


def quick_password_hashes() -> None:
    """Passwords the tests make are hashed cheaply (tests/hashers.py); any hash still verifies."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = [
        "tests.hashers.QuickPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


def workers_apart() -> None:
    """Under pytest-xdist, each worker is a site of its own beside the others: its own test
    database (pytest-django names it test_loop_gw0, ...), and here its own workspaces directory
    and with it its own sandbox uid range. Every worker's user ids start at 1, so sharing either
    would give two workers' users one workspace, or one uid and with it the kernel's process
    budget, a person's memory cgroup and the processes a test counts as its user's. The child
    processes a test starts (workers, daphne, runagent) inherit both through the environment."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    from django.conf import settings

    from loopsite.settings import sandbox_uid_base

    shared = settings.LOOP_WORKSPACES_DIR
    workspaces = shared.with_name(f"{shared.name}-{worker}")
    settings.LOOP_WORKSPACES_DIR = workspaces
    os.environ["LOOP_WORKSPACES_DIR"] = str(workspaces)
    if "LOOP_SANDBOX_UID_BASE" in os.environ:  # one set range: each worker takes a part of it
        base = int(os.environ["LOOP_SANDBOX_UID_BASE"]) + int(worker[2:]) * XDIST_UID_STRIDE
        os.environ["LOOP_SANDBOX_UID_BASE"] = str(base)
    else:  # derived from the directory, as a site's is
        base = sandbox_uid_base(workspaces)
    settings.LOOP_SANDBOX_UID_BASE = base


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (as `make test` runs it): the tests of a module go to one worker
    together, so its module-scoped fixtures (ModuleRecords, a migrated data directory) are made
    once; modules marked `pytest.mark.xdist_group(NAME)` go to one worker together, so they never
    run at the same time as each other. Stock loadgroup would hand out every other test alone."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroupScheduling(config, log)


def child_environment(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CONFIG_VARIABLES}
    env["DJANGO_SETTINGS_MODULE"] = "loopsite.settings"
    env["PGAPPNAME"] = CHILD_APPLICATION_NAME
    env.update(overrides)
    return env


ManageCommand = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def manage() -> ManageCommand:
    """Run `manage.py ARGS` in a child process with the given environment overrides."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT_DIR,
            env=child_environment(**(env or {})),
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


@pytest.fixture(autouse=True)
def _no_warm_sandbox_outlives_its_test() -> Iterator[None]:
    yield
    from .sandboxes import SANDBOX

    SANDBOX.pool.drain()


@pytest.fixture(autouse=True)
def _each_test_reads_the_console_prices_afresh() -> None:
    """A test's prices are rolled back with it; the process's copy of them must go too."""
    from accounting.prices import console_rates

    console_rates.forget()


@pytest.fixture(autouse=True, scope="session")
def _the_tests_sandboxes_close() -> Iterator[None]:
    yield
    from .sandboxes import SANDBOX

    SANDBOX.close()


@pytest.fixture
def workspaces(settings) -> Iterator[Path]:
    """A workspaces directory the unprivileged sandbox user can traverse (pytest's tmp is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="loop-workspaces-", dir="/tmp"))
    root.chmod(0o711)
    settings.LOOP_WORKSPACES_DIR = root
    yield root
    shutil.rmtree(root, ignore_errors=True)


class ModuleRecords:
    """Records a test module makes once and commits (real runs, sandbox and all), for tests that
    only read them, or change them inside their own transaction, rolled back at their end."""

    def __init__(self, blocker: Any, workspaces: Path) -> None:
        self.blocker, self.workspaces = blocker, workspaces

    def make(self, build: Callable[[], Any]) -> Any:
        """What `build()` makes and returns, committed, with the database open to it and
        workspaces under this module's directory."""
        from django.test import override_settings

        from .sandboxes import SANDBOX

        with self.blocker.unblock(), override_settings(LOOP_WORKSPACES_DIR=self.workspaces):
            made = build()
            SANDBOX.pool.drain()
        return made


@pytest.fixture(scope="module")
def module_records(django_db_setup, django_db_blocker) -> Iterator[ModuleRecords]:
    """Made once per module; at its end, every user made since (with their runs, memories and
    forgettings) is deleted, and the embedding space if it was new, so no later test sees them."""
    from django.contrib.auth.models import User

    from memory.models import EmbeddingSpace, ForgottenMemory

    root = Path(tempfile.mkdtemp(prefix="loop-workspaces-", dir="/tmp"))
    root.chmod(0o711)  # the unprivileged sandbox user traverses it
    with django_db_blocker.unblock():
        had_embedding_space = EmbeddingSpace.objects.exists()
        last_user = User.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    try:
        yield ModuleRecords(django_db_blocker, root)
    finally:
        with django_db_blocker.unblock():
            made = User.objects.filter(pk__gt=last_user)
            ForgottenMemory.objects.filter(owner__in=made).delete()
            made.delete()
            if not had_embedding_space:
                EmbeddingSpace.objects.all().delete()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def child_database_url(transactional_db) -> str:
    """A DATABASE_URL that points a child process at this test run's database."""
    from django.db import connection

    params = connection.get_connection_params()
    name = connection.settings_dict["NAME"]
    return f"postgresql://{params['user']}@/{name}?host={params['host']}"


# The password the people of the tests log in with.
PASSWORD = "a long enough passphrase 42"


@pytest.fixture
def nothing_configured(settings):
    """Only the mock model, whatever the environment says: no Groq key, no model server, no model
    names; and no retries, so a test of a server's failure sees its one request."""
    settings.GROQ_API_KEY = ""
    settings.LOOP_MODEL = ""
    settings.LOOP_MODELS = []
    settings.LOOP_OPENAI_BASE_URL = ""
    settings.LOOP_OPENAI_MODEL = ""
    settings.LOOP_OPENAI_API_KEY = ""
    settings.LOOP_OPENAI_MAX_RETRIES = 0
    return settings


@pytest.fixture
def alice():
    """A user; the test's django_db mark decides how the database is used."""
    from django.contrib.auth.models import User

    return User.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def as_alice(alice):
    """A client logged in as alice."""
    from django.test import Client

    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def async_views_keep_the_tests_connection(monkeypatch) -> None:
    """Django's test client keeps the test's connection, and so its transaction, across a
    request (it disconnects close_old_connections from the request signals); channels'
    database_sync_to_async, which the API's streams read through, calls it directly around each
    read, which would close that connection mid-transaction. The same here, for a test that
    drives those views through the test client in its transaction."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)
    # A stream hears its run through the channel layer alone (the in-memory one of the tests),
    # as over Redis: the NOTIFY listener would take the test's connection to learn its
    # parameters, and release it.
    monkeypatch.setattr("agent.bus.NotifyTransport.listener", lambda self: bus_groups())


def bus_groups() -> Any:
    from agent.bus import _groups

    return _groups


@pytest.fixture
def alice_key(alice) -> str:
    """A key of alice's with every scope (its secret, as a program shows it)."""
    from api.keys import create_key
    from api.models import ALL_SCOPES

    return create_key(alice, "tests", ALL_SCOPES).secret


@pytest.fixture
def operator(client):
    """A superuser logged in on the test's client: the console's operator."""
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("root", "root@example.com", "a long password")
    client.force_login(user)
    return user


@pytest.fixture
def bob():
    from django.contrib.auth.models import User

    return User.objects.create_user("bob", password=PASSWORD)


def wait_for(condition: Callable[[], object], what: str, timeout: float = 90.0) -> object:
    """Poll until `condition()` is truthy; a generous bound only turns a hang into a failure."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"Gave up waiting for {what}")
        time.sleep(0.05)
    return result


class Clock:
    """time.monotonic, moved on by hand: a test that needs a deadline passed moves the clock past
    it rather than sleeping until it is. Only ever forward, so every other reader of the clock
    in the process still sees time run one way."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ahead = 0.0
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() + self.ahead)

    def advance(self, seconds: float) -> None:
        self.ahead += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """This test's clock (time.monotonic), which only `advance` moves past what the wall says."""
    return Clock(monkeypatch)


@pytest.fixture
def worker_env(child_database_url, workspaces) -> dict[str, str]:
    """The environment of a worker or web server process sharing this test's database."""
    return {"DATABASE_URL": child_database_url, "LOOP_WORKSPACES_DIR": str(workspaces)}


@pytest.fixture
def start_worker(worker_env) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `manage.py worker ARGS` processes (`--supervise` as `make run` does), with the given
    environment overrides; each, with any worker a supervisor started, is stopped after the
    test. Each runs in a process group of its own, which a supervisor's worker shares."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, **env: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "worker", *args],
            cwd=PROJECT_DIR,
            env=child_environment(**{**worker_env, **env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in started:
        process.communicate(timeout=60)
        wait_for(lambda pid=process.pid: not group_alive(pid), "a supervised worker to stop")
    others_gone()


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` is still running."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def children(parent: int) -> dict[int, list[str]]:
    """The processes whose parent is `parent`, each with its command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except (OSError, NotADirectoryError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found[int(entry.name)] = argv
    return found


class OutputLines:
    """A running process's output, read as it comes (a pipe nobody reads would fill up)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._reader.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line)

    def count(self, words: str) -> int:
        return sum(words in line for line in list(self.lines))

    @property
    def text(self) -> str:
        """All of it, once the process has closed its output."""
        self._reader.join(timeout=60)
        return "".join(self.lines)


def others_gone() -> None:
    """Wait for the sessions of stopped child processes to leave the database, which PostgreSQL
    ends a moment after the process; the test database cannot be dropped while one is there.
    A session still there after CHILD_SESSIONS_SECONDS (its backend busy in a statement, which
    notices its client is gone only when the statement ends) is ended, and a warning says what
    it was doing."""
    import warnings

    from django.db import connection

    def lingering() -> list[tuple[object, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, state, wait_event_type, wait_event, left(query, 200) "
                "FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s "
                "AND pid <> pg_backend_pid()",  # never this test's own session
                [CHILD_APPLICATION_NAME],
            )
            return cursor.fetchall()

    try:
        wait_for(lambda: not lingering(), "child sessions to end", CHILD_SESSIONS_SECONDS)
    except AssertionError:
        left = lingering()
        warnings.warn(f"Stopped processes' sessions ended by the test: {left}", stacklevel=2)
        with connection.cursor() as cursor:
            for pid, *_ in left:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(lambda: not lingering(), "the stopped processes' database sessions to end")


CHILD_SESSIONS_SECONDS = 30.0


@pytest.fixture
def start_daphne(worker_env, tmp_path) -> Iterator[Callable[..., object]]:
    """Start daphne (serving tests.socket_harness's probe application) on a free port with the
    given environment, as `make run` would; each is stopped after the test."""
    from tests.socket_harness import daphnes

    yield from daphnes(worker_env, tmp_path)


@pytest.fixture(params=["dead port", "silent server"])
def broken_redis(request) -> Iterator[str]:
    """A REDIS_URL that cannot serve: nothing listens there, or a server accepts and never
    answers."""
    from tests.socket_harness import free_port, silent_server

    if request.param == "dead port":
        yield f"redis://127.0.0.1:{free_port()}/0"
        return
    with silent_server() as port:
        yield f"redis://127.0.0.1:{port}/0"


def start_redis(port: int, directory: Path) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own on `port`, on loopback, keeping nothing on disk."""
    return subprocess.Popen(
        ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """The URL of a Redis of this test's own on a free port, once it answers: the test needs no
    Redis on the host, and shares none. Stopped after the test."""
    from tests.socket_harness import free_port

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(port, tmp_path)
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        wait_for(lambda: server.poll() is not None or answers(client), "Redis to answer")
        assert server.poll() is None, f"redis-server exited ({server.returncode})"
        yield url
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)


def answers(client: redis.Redis) -> bool:
    """Whether the Redis behind `client` answers a ping."""
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
