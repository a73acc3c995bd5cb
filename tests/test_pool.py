"""Bounded connections: every process borrows its database sessions from a pool of
LOOP_DB_POOL_SIZE (Django's own, on psycopg_pool), a run's thread gives its connection back after
each event it records, and a thread that finds the pool empty for LOOP_DB_POOL_TIMEOUT fails
saying so. Counted in the real server's pg_stat_activity, per process (libpq's PGAPPNAME)."""

import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from psycopg_pool import ConnectionPool

from agent.models import AgentRun
from agent.runs import new_conversation, submit_run
from core.events import RunStatus
from loopsite.database import Pool, database_settings
from loopsite.embedded_postgres.base import RevivingConnection
from loopsite.postgres import base as backend
from tests.conftest import PROJECT_DIR, child_environment, wait_for
from tests.test_settings import PRODUCTION, load_settings

# Procrastinate's own sessions in a worker, beside Django's pool: its pool of 4 and one LISTEN for
# each of the worker's three Procrastinate workers: runs, recovery, notifications (docs/engine.md).
PROCRASTINATE_SESSIONS = 7
PORTS = range(8200, 8300)  # this branch's ports


def sessions(application: str) -> int:
    """The sessions the processes named `application` hold on the test database now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [application],
        )
        return cursor.fetchone()[0]


class Peak:
    """The most sessions of `application` seen at once, sampled every 20 ms from a thread."""

    def __init__(self, application: str) -> None:
        self.application = application
        self.most = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        try:
            while not self.done.wait(0.02):
                self.most = max(self.most, sessions(self.application))
                self.samples += 1
        finally:
            connection.close()  # this thread's own

    def __enter__(self) -> "Peak":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def test_the_pool_is_sized_by_the_settings(monkeypatch, tmp_path):
    sized = {"LOOP_DB_POOL_SIZE": "7", "LOOP_DB_POOL_TIMEOUT": "2.5"}
    embedded = load_settings(monkeypatch, tmp_path, **sized)["DATABASES"]["default"]
    served = load_settings(monkeypatch, tmp_path, **PRODUCTION, **sized)["DATABASES"]["default"]
    for database in (embedded, served):
        assert database["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 7, "timeout": 2.5}
        assert database["CONN_MAX_AGE"] == 0  # Django's pool wants it: a close gives it back
    assert served["OPTIONS"]["sslmode"] == "require"

    unpooled = load_settings(monkeypatch, tmp_path, LOOP_DB_POOL_SIZE="0")["DATABASES"]["default"]
    assert "pool" not in unpooled["OPTIONS"]
    assert unpooled["CONN_MAX_AGE"] == 60
    assert database_settings("", tmp_path, Pool(0, 1.0))["OPTIONS"] == {}


@pytest.mark.django_db
def test_the_embedded_server_s_pool_starts_the_server_again_when_it_connects(settings):
    pool = connection.pool
    assert pool is not None
    assert pool.max_size == settings.LOOP_DB_POOL_SIZE
    assert issubclass(pool.connection_class, RevivingConnection)
    assert pool.connection_class.pgdata.name == "postgres"


@contextmanager
def pool_of_one() -> Iterator[ConnectionPool[Any]]:
    """A pool of one session to the test database, checked as Loop's pools are."""
    kwargs = {**connection.get_connection_params(), "autocommit": True}
    with ConnectionPool(
        kwargs=kwargs,
        min_size=1,
        max_size=1,
        timeout=30,
        check=backend.check_cheaply,
        connection_class=backend.WatchedConnection,
        open=True,
    ) as pool:
        yield pool


def lend(pool: ConnectionPool[Any]) -> int:
    """Borrow the pool's session, use it, give it back: its server process's id."""
    session = pool.getconn()
    try:
        session.execute("SELECT 1")
        return int(session.info.backend_pid)
    finally:
        pool.putconn(session)


@pytest.mark.django_db(transaction=True)
def test_a_session_lent_again_soon_costs_no_round_trip_one_left_quiet_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's check asked the server at every borrow, two round trips a run's step: now only
    a session left unlent for QUIET_SECONDS is asked."""
    asked: list[None] = []
    ask = ConnectionPool.check_connection
    monkeypatch.setattr(
        ConnectionPool, "check_connection", staticmethod(lambda session: asked.append(ask(session)))
    )
    with pool_of_one() as pool:
        first = [lend(pool) for _ in range(5)]
        assert len(set(first)) == 1  # one session, lent five times
        assert len(asked) == 1  # when it was lent first: never before
        monkeypatch.setattr(backend, "QUIET_SECONDS", 0.0)
        lend(pool)
        assert len(asked) == 2


@pytest.mark.django_db(transaction=True)
def test_a_session_the_server_ended_is_not_lent_a_fresh_one_is() -> None:
    """What the check costs no round trip for still finds a dead session: the server that ends
    a session (a restart, pg_terminate_backend) says so on its socket."""
    with pool_of_one() as pool:
        ended = lend(pool)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [ended])
        wait_for(lambda: sessions_of_pid(ended) == 0, "the session to end")
        fresh = lend(pool)  # a dead one would fail here
    assert fresh != ended


def sessions_of_pid(pid: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return int(cursor.fetchone()[0])


def run_in_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py shell -c CODE` in a process of its own; a hang fails the test at the bound."""
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=PROJECT_DIR,
        env=child_environment(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


# One thread holds the pool's only connection; another asks for one.
STARVED = """
import threading, time
from django.db import OperationalError, connection
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
failure = {}
def ask():
    began = time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except OperationalError as error:
        failure["error"] = f"{type(error.__cause__).__name__}: {error}"
    failure["waited"] = time.monotonic() - began
    connection.close()
asker = threading.Thread(target=ask)
asker.start()
asker.join(60)
print("alive" if asker.is_alive() else "ended")
print(failure.get("error", "no error"))
print(f"{failure.get('waited', -1):.2f}")
"""


@pytest.mark.django_db(transaction=True)
def test_a_thread_that_waits_for_a_connection_past_the_timeout_fails_saying_why(
    child_database_url,
):
    done = run_in_child(
        STARVED,
        DATABASE_URL=child_database_url,
        LOOP_DB_POOL_SIZE="1",
        LOOP_DB_POOL_TIMEOUT="0.5",
    )
    assert done.returncode == 0, done.stderr
    ended, error, waited = done.stdout.strip().splitlines()[-3:]
    assert ended == "ended"  # it did not hang
    assert error.startswith("PoolExhausted: No database connection came free within 0.5 s")
    assert "all 1 of this process's pool are lent (LOOP_DB_POOL_SIZE, LOOP_DB_POOL_TIMEOUT" in error
    assert float(waited) >= 0.5


@pytest.mark.django_db(transaction=True)
def test_sixteen_runs_on_a_worker_with_a_pool_of_three_hold_at_most_the_bound(
    alice, django_user_model, start_worker
):
    """Before the pool, each running run's thread held a session of its own: 16 runs, 22."""
    size = 3
    start_worker("--concurrency", "16", LOOP_MOCK_LATENCY_MS="500", LOOP_DB_POOL_SIZE=str(size))
    first = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    wait_for(lambda: status_of(first) == RunStatus.SUCCEEDED, "the first run to succeed")
    people = [django_user_model.objects.create_user(f"person-{n}") for n in range(16)]
    with Peak(child_environment()["PGAPPNAME"]) as peak:
        runs = [
            submit_run(p, "Count slowly to 3", new_conversation(p), model="mock") for p in people
        ]
        wait_for(
            lambda: all(status_of(run) == RunStatus.SUCCEEDED for run in runs),
            "all 16 runs to succeed",
            timeout=180,
        )
    spans = [run.events.order_by("seq").values_list("created_at", flat=True) for run in runs]
    assert max(span.first() for span in spans) < min(span.last() for span in spans)  # 16 at once
    assert peak.samples > 10
    assert peak.most <= size + PROCRASTINATE_SESSIONS


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8200-8299")


WEB_APP = "loop-test-web"


@pytest.fixture
def daphne(child_database_url, workspaces) -> Iterator[str]:
    """The site under daphne, as `make run` serves it, with a pool of 3; its URL."""
    port = free_port()
    env = child_environment(
        DATABASE_URL=child_database_url,
        LOOP_WORKSPACES_DIR=str(workspaces),
        LOOP_DB_POOL_SIZE="3",
        PGAPPNAME=WEB_APP,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
         "loopsite.asgi:application"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(url) or process.poll() is not None, "daphne to answer", 120)
        assert process.poll() is None, process.communicate()[1]
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=60)
        wait_for(lambda: sessions(WEB_APP) == 0, "daphne's sessions to end")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/accounts/login/", timeout=5):  # noqa: S310
            return True
    except OSError:
        return False


@pytest.mark.django_db(transaction=True)
def test_the_web_serves_a_burst_on_at_most_its_pool(alice, daphne):
    """Before the pool, each request in flight had a session: 120 requests 30 at once, ~30."""
    client = Client()
    client.force_login(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}"

    def home(_: int) -> int:
        request = urllib.request.Request(f"{daphne}/", headers={"Cookie": cookie})  # noqa: S310
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status

    with Peak(WEB_APP) as peak, ThreadPoolExecutor(20) as pages:
        statuses = list(pages.map(home, range(80)))
    assert set(statuses) == {200}
    assert peak.samples > 5
    assert 1 <= peak.most <= 3
    assert sessions(WEB_APP) <= 3  # kept for the next requests, within the pool
