"""Loop on several hosts (tests/topology/hosts.py): PostgreSQL with pgvector on one, Redis on
another, daphne on web hosts A and B, a worker on worker hosts D and E, and the person on a sixth,
each process bound to its own host's address in a network namespace of its own.

A person sends a task on web host A and watches its run on a socket to A and one to B, as two
pages would. Whichever worker host takes the run is called D below, the other E:

- both sockets see every event of the run, in order, although neither web host works it;
- D's worker killed with SIGKILL mid-run: E resumes the run, and each tool call is executed once;
- D cut off from everything (its link down) for longer than LOOP_STALE_SECONDS, in the middle of
  a transaction holding the run's row: E resumes the run (once the server ended D's stuck
  session), and when D's link is back its writes are refused (its attempt is fenced off), so
  nothing is recorded twice and no tool call runs twice;
- PostgreSQL and Redis restarted mid-run: the run finishes, the pages see all of it, and the
  workers work the next run, without anyone restarting them.

"Executed once" is read from what Loop makes durable before and after a tool runs: one
`tool_call_started` (stored before the tool is started, fenced like every event), one
`tool_call_finished` and one ToolExecution row per call id. Runs in `make test`; skipped where
network namespaces cannot be made (not root, no `ip`, no CAP_NET_ADMIN).
"""

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.topology import hosts

SHORT_TASK = "count slowly to 3"  # 3 snippets of a second each, and 4 model turns
LONG_TASK = "count slowly to 6"  # long enough to be cut in the middle
STALE_SECONDS = 6
WAIT = 120.0  # seconds: a bound that turns a hang into a failure, not a timing assertion


@pytest.fixture(scope="module")
def site() -> Iterator[hosts.Site]:
    why_not = hosts.why_not_possible()
    if why_not:
        pytest.skip(f"the several-host test needs Linux network namespaces as root: {why_not}")
    with hosts.site(latency_ms=200, stale_seconds=STALE_SECONDS) as built:
        built.create_person("ann")
        yield built


@dataclass
class Watch:
    """The person's client on the client host, and what it printed so far."""

    site: hosts.Site
    lines: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None

    def start(self, task: str) -> "Watch":
        self.process = self.site.client("ann", task)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(json.loads(line))

    def run_id(self) -> int:
        sent = self.site.wait_for(lambda: self.first("sent"), "the run to be sent", WAIT)
        return sent["run"]

    def first(self, event: str) -> dict[str, Any] | None:
        return next((line for line in list(self.lines) if line["event"] == event), None)

    def finish(self) -> None:
        """Wait for the client to see the run end on both sockets."""
        self.process.wait(WAIT)
        stderr = self.process.stderr.read()
        errors = [line for line in self.lines if line["event"] == "error"]
        assert not errors, f"{errors}\n{stderr}\n{self.site.log_tails()}"
        assert self.process.returncode == 0, stderr

    def frames(self, web: str) -> list[dict[str, Any]]:
        url = self.site.web_url(web)
        return [line for line in self.lines if line["event"] == "frame" and line["web"] == url]

    def reconnects(self) -> int:
        return sum(line["event"] == "reconnect" for line in self.lines)


# What the database says ---------------------------------------------------------------------


def query(site: hosts.Site, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with site.connect() as db:
        return db.execute(sql, params).fetchall()


def run_row(site: hosts.Site, run_id: int) -> dict[str, Any]:
    row = query(
        site, "SELECT status, attempt, worker, resumes FROM agent_agentrun WHERE id = %s", run_id
    )[0]
    return dict(zip(("status", "attempt", "worker", "resumes"), row, strict=True))


def events(site: hosts.Site, run_id: int) -> list[tuple[int, str, dict[str, Any]]]:
    return query(
        site, "SELECT seq, kind, data FROM agent_runevent WHERE run_id = %s ORDER BY seq", run_id
    )


def host_of(worker: str) -> str:
    """The worker host a run's `worker` (host:pid) names."""
    return worker.split(":")[0].removeprefix(hosts.PREFIX)


def working_host(site: hosts.Site, run_id: int, calls_done: int) -> str:
    """Wait until the run is being worked and has finished `calls_done` tool calls; the worker
    host working it."""

    def ready() -> str:
        finished = sum(kind == "tool_call_finished" for _, kind, _ in events(site, run_id))
        row = run_row(site, run_id)
        return row["status"] == "running" and finished >= calls_done and host_of(row["worker"])

    return site.wait_for(ready, f"run {run_id} to finish {calls_done} tool calls", WAIT)


def resumed_by(site: hosts.Site, run_id: int, host: str) -> dict[str, Any]:
    """Wait until a worker on `host` took the run over; the run's row then."""

    def taken() -> dict[str, Any] | None:
        row = run_row(site, run_id)
        return row if row["attempt"] > 1 and host_of(row["worker"]) == host else None

    return site.wait_for(taken, f"a worker on {host} to resume run {run_id}", WAIT)


def live_workers(site: hosts.Site) -> int:
    """Procrastinate workers whose heartbeat is fresh."""
    return query(
        site,
        "SELECT count(*) FROM procrastinate_workers "
        "WHERE last_heartbeat > now() - make_interval(secs => %s)",
        STALE_SECONDS,
    )[0][0]


def hold_the_run_row(site: hosts.Site, host: str, run_id: int) -> subprocess.Popen[str]:
    """A session from `host` that holds the run's row locked in an open transaction, as D's
    recorder does between an UPDATE of the run and its COMMIT: cut off then, D keeps the lock
    until the server ends the session (hosts.py sets idle_in_transaction_session_timeout)."""
    script = (
        "import psycopg, sys, time\n"
        "db = psycopg.connect(sys.argv[1])\n"
        "db.execute('SELECT 1 FROM agent_agentrun WHERE id = %s FOR UPDATE', (sys.argv[2],))\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n"
    )
    argv = [sys.executable, "-c", script, site.database_url, str(run_id)]
    locker = subprocess.Popen(hosts.on_host(host, argv), stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


def the_other(host: str) -> str:
    (other,) = (worker for worker in hosts.WORKERS if worker != host)
    return other


# What must hold of every run ----------------------------------------------------------------


def assert_recorded_once(site: hosts.Site, run_id: int) -> list[tuple[int, str, dict[str, Any]]]:
    """The log is whole (seq 1..N, ending with the run's end) and each tool call in it started
    once, finished once, and has one ToolExecution row."""
    log = events(site, run_id)
    assert [seq for seq, _, _ in log] == list(range(1, len(log) + 1))
    assert log[-1][1] == "run_finished"
    assert sum(kind == "run_finished" for _, kind, _ in log) == 1
    started = Counter(data["call_id"] for _, kind, data in log if kind == "tool_call_started")
    finished = Counter(data["call_id"] for _, kind, data in log if kind == "tool_call_finished")
    assert started, log
    assert set(started.values()) == {1}, started
    assert finished == started, (started, finished)
    executions = Counter(
        call_id
        for (call_id,) in query(
            site, "SELECT call_id FROM tools_toolexecution WHERE run_id = %s", run_id
        )
    )
    assert executions == started, (executions, started)
    return log


def assert_seen_whole(watch: Watch, run_id: int, log: list[tuple[int, str, dict[str, Any]]]):
    """Each web host's socket saw the run to its last event, its seq markers never going back,
    and both showed the same cards in the same order: one per event that has one, a tool call's
    card first as started then as finished, a resume's marker."""
    shown = {}
    for web in hosts.WEBS:
        frames = watch.frames(web)
        marks = [frame["seq"] for frame in frames if frame["seq"] is not None]
        assert marks == sorted(marks), (web, marks)
        assert marks[-1] == log[-1][0], (web, marks)
        assert frames[-1]["finished"], web
        assert not any(frame["finished"] for frame in frames[:-1]), web
        shown[web] = [card for frame in frames for card in frame["cards"]]
    assert shown["web-a"] == shown["web-b"], shown
    cards = shown["web-a"]
    for seq, kind, data in log:
        if kind == "tool_call_started":
            card = f"call-{run_id}-{data['step']}-{data['call_id']}"
            assert cards.count(card) == 2, (card, cards)
        if kind in ("run_resumed", "run_finished"):
            assert cards.count(f"ev-{run_id}-{seq}") == 1, (seq, kind, cards)


# The tests ----------------------------------------------------------------------------------


def test_sockets_on_two_web_hosts_see_every_event_of_a_run_worked_on_a_third(site):
    watch = Watch(site).start(SHORT_TASK)
    run_id = watch.run_id()
    watch.finish()

    row = run_row(site, run_id)
    assert row["status"] == "succeeded"
    assert host_of(row["worker"]) in hosts.WORKERS
    assert row["attempt"] == 1
    assert row["resumes"] == 0
    log = assert_recorded_once(site, run_id)
    assert_seen_whole(watch, run_id, log)
    assert watch.reconnects() == 0


def test_a_link_cut_longer_than_the_stale_time_moves_the_run_and_fences_the_cut_worker(site):
    watch = Watch(site).start(LONG_TASK)
    run_id = watch.run_id()
    d = working_host(site, run_id, calls_done=2)
    e = the_other(d)
    d_worker = run_row(site, run_id)["worker"]
    locker = hold_the_run_row(site, d, run_id)
    site.cut(d)
    try:
        resumed_by(site, run_id, e)
    finally:
        site.mend(d)
        locker.kill()
    # D's worker, back on the network, tries to write what it was doing, and is refused.
    site.wait_for(
        lambda: "taken over by another worker" in site.processes[d].text(),
        f"{d}'s worker to find its run taken over",
    )
    watch.finish()

    row = run_row(site, run_id)
    assert row["status"] == "succeeded", row
    assert row["resumes"] == 1
    lost = query(site, "SELECT lost_worker FROM agent_runresume WHERE run_id = %s", run_id)
    assert lost == [(d_worker,)]
    log = assert_recorded_once(site, run_id)
    assert_seen_whole(watch, run_id, log)
    assert site.processes[d].alive(), "the cut worker went on living"


def test_postgresql_and_redis_restarted_mid_run_and_everything_comes_back(site):
    watch = Watch(site).start(LONG_TASK)
    run_id = watch.run_id()
    working_host(site, run_id, calls_done=1)
    site.stop_postgres()
    site.stop("redis")
    site.start_postgres()
    site.start_redis()
    watch.finish()

    assert run_row(site, run_id)["status"] == "succeeded"
    log = assert_recorded_once(site, run_id)
    assert_seen_whole(watch, run_id, log)
    # Both workers are connected again: each process is two Procrastinate workers (runs and
    # recovery) with a fresh heartbeat.
    site.wait_for(lambda: live_workers(site) >= 2 * len(hosts.WORKERS), "both workers back")
    # Both web hosts and the workers serve the next run, none of them restarted.
    after = Watch(site).start(SHORT_TASK)
    next_run = after.run_id()
    after.finish()
    assert run_row(site, next_run)["status"] == "succeeded"
    assert_seen_whole(after, next_run, assert_recorded_once(site, next_run))
    # Its sockets joined their run's group in Redis at once: live, never reading the log
    # instead ("degraded"), which is what a socket does while Redis fails it.
    states = [frame["state"] for web in hosts.WEBS for frame in after.frames(web)]
    assert "degraded" not in states
    assert all(site.processes[role].alive() for role in (*hosts.WEBS, *hosts.WORKERS))


def test_a_worker_killed_mid_run_has_its_run_resumed_on_the_other_host_each_call_once(site):
    watch = Watch(site).start(LONG_TASK)
    run_id = watch.run_id()
    d = working_host(site, run_id, calls_done=2)
    e = the_other(d)
    d_worker = run_row(site, run_id)["worker"]
    site.stop(d, signal.SIGKILL)
    resumed_by(site, run_id, e)
    watch.finish()

    row = run_row(site, run_id)
    assert row["status"] == "succeeded", row
    assert row["resumes"] == 1
    lost = query(site, "SELECT lost_worker FROM agent_runresume WHERE run_id = %s", run_id)
    assert lost == [(d_worker,)]
    log = assert_recorded_once(site, run_id)
    assert_seen_whole(watch, run_id, log)
