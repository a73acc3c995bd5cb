"""A worker killed in the middle of the load: how soon its runs go on, and that none is lost or
does a tool call twice; and how late a worker's heartbeat comes when its machine is overloaded.

    .venv/bin/python bench/recovery.py [--runs 20] [--stale-seconds S] [--latency-ms 500]
        [--scenarios make-run,same-host,other-host] [--project OLD]
    .venv/bin/python bench/recovery.py --heartbeats [--runs 64] [--concurrency 32] [--hogs 2]

Starts a fresh site (bench/_stack.py: daphne on a port of 8300-8399, an embedded PostgreSQL of
its own, Redis, the mock at --latency-ms a turn), works one warm-up run, then has --runs people log
in and all send the demo task at once and watch it on the page's socket. As soon as a tool call
of the load has finished, a worker holding running runs is killed with SIGKILL (no hand-back, as
an OOM kill or a crash). Three scenarios, one after the other on the same site:

- make-run: one worker, under its supervisor as `make run` starts it (`manage.py worker
  --supervise`, which starts it again about a second after it dies); it is killed, and its runs
  go on once the worker started again in its place takes them back (or, on code that cannot,
  once its heartbeat is stale);
- same-host: two workers, one under its supervisor as `make run` starts it (`manage.py worker
  --supervise`) and one plain beside it; the supervised one is killed, and its runs go on once
  the one beside it or the one started again takes them back, whichever comes first;
- other-host: two plain workers named as workers of another host name themselves
  (`--name elsewhere:PID`, so no pid of theirs can be judged here); the one holding the most runs
  is killed and nothing starts it again, as when a machine is lost: the other finds it dead by its
  heartbeat, within LOOP_STALE_SECONDS + 5 s.

Figures, per scenario:
- time to resume, p50 and max: from the kill to the RunResumed event of each run the killed
  worker held;
- runs lost: runs that did not end `succeeded` or were not seen to finish on their page (0);
- tool calls executed twice: ToolExecution rows per (run, call_id) beyond one, not counting the
  `interrupted` answer a resumed run records for a call that never finished (0);
- events lost on the pages' sockets, as bench/load.py counts them (0).

--heartbeats instead measures whether LOOP_STALE_SECONDS is safe: one worker at --concurrency
works --runs runs sent at once while --hogs processes spin on the CPU at the worker's own
priority, and the workers' heartbeat rows are read every 0.1 s: the gaps between a worker's
heartbeats (due every LOOP_STALE_SECONDS / 3) and the oldest any heartbeat was seen, which must
stay well under LOOP_STALE_SECONDS or a live worker would be taken for dead.
"""

import argparse
import asyncio
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack
from bench._stack import (
    MAIN_PROJECT,
    WORKER_APP,
    Person,
    Stack,
    Watched,
    everyone_sends,
    log_in_all,
    percentile,
    run_rows,
    running_stack,
    say_errors,
)
from bench.load import warm_up

PORTS = range(8300, 8400)  # this bench's web ports (the machine is shared)
SCENARIOS = ("make-run", "same-host", "other-host")
Kill = tuple[int, float, list[int]]  # the killed worker's pid, when, and the runs it held


def free_port_in_range() -> int:
    """A free port of PORTS for daphne (bench/_stack.py asks for any free port)."""
    import socket

    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


_stack.free_port = free_port_in_range


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def holders(stack: Stack) -> dict[int, int]:
    """Per worker process (the pid its runs name, `host:pid`): how many runs it works now."""
    counts: dict[int, int] = {}
    for (worker,) in stack.query("SELECT worker FROM agent_agentrun WHERE status = 'running'"):
        pid = worker.rpartition(":")[2]
        if pid.isdigit():
            counts[int(pid)] = counts.get(int(pid), 0) + 1
    return counts


def calls_finished(stack: Stack, since_run: int) -> int:
    rows = stack.query(
        "SELECT count(*) FROM agent_runevent WHERE run_id > %s AND kind = 'tool_call_finished'",
        (since_run,),
    )
    return rows[0][0]


async def kill_mid_load(stack: Stack, since_run: int, supervisor: int | None) -> Kill:
    """Wait until the load has finished a tool call, then SIGKILL a worker holding running runs:
    the supervisor's child if there is a supervisor, else the one holding the most. Its pid, the
    moment of the kill, and the runs it held."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if await asyncio.to_thread(calls_finished, stack, since_run):
            counts = await asyncio.to_thread(holders, stack)
            if supervisor is not None:
                counts = {pid: n for pid, n in counts.items() if parent_of(pid) == supervisor}
            victim = max(counts, key=counts.__getitem__, default=0)
            if victim and counts[victim]:
                held = await asyncio.to_thread(runs_of, stack, victim)
                os.kill(victim, signal.SIGKILL)
                return victim, time.time(), held
        await asyncio.sleep(0.02)
    raise SystemExit("no worker held a running run with a finished tool call")


def runs_of(stack: Stack, pid: int) -> list[int]:
    rows = stack.query("SELECT id, worker FROM agent_agentrun WHERE status = 'running'")
    return [run_id for run_id, worker in rows if worker.rpartition(":")[2] == str(pid)]


async def load(
    stack: Stack, usernames: list[str], since_run: int, supervisor: int | None
) -> tuple[list[Watched], Kill]:
    people = await log_in_all(stack, usernames)
    try:
        killing = asyncio.create_task(kill_mid_load(stack, since_run, supervisor))
        watched = await everyone_sends(people)
        return watched, await killing
    finally:
        await asyncio.gather(*(person.close() for person in people))


def resumed_at(stack: Stack, run_ids: list[int], killed_at: float) -> dict[int, float]:
    """Each run's first RunResumed event after the kill, as epoch seconds."""
    rows = stack.query(
        "SELECT run_id, min(extract(epoch FROM created_at)) FROM agent_runevent "
        "WHERE run_id = ANY(%s) AND kind = 'run_resumed' AND created_at >= to_timestamp(%s) "
        "GROUP BY run_id",
        (run_ids, killed_at),
    )
    return {run_id: float(at) for run_id, at in rows}


def twice(stack: Stack, run_ids: list[int]) -> tuple[int, int]:
    """Tool calls executed more than once (extra executions), and calls answered `interrupted`."""
    doubled = stack.query(
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM tools_toolexecution "
        "WHERE run_id = ANY(%s) AND status <> 'interrupted' GROUP BY run_id, call_id) AS calls",
        (run_ids,),
    )[0][0]
    interrupted = stack.query(
        "SELECT count(*) FROM tools_toolexecution "
        "WHERE run_id = ANY(%s) AND status = 'interrupted'",
        (run_ids,),
    )[0][0]
    return int(doubled), int(interrupted)


def report(
    scenario: str, stack: Stack, watched: list[Watched], kill: Kill, stale: int, workers: int
) -> None:
    victim, killed_at, held = kill
    ids = [seen.run_id for seen in watched if seen.run_id]
    rows = run_rows(stack, ids)
    resumed = resumed_at(stack, held, killed_at)
    delays = [resumed[run_id] - killed_at for run_id in held if run_id in resumed]
    lost = [
        seen.username
        for seen in watched
        if seen.error or not seen.finished_at or rows.get(seen.run_id, None) is None
        or rows[seen.run_id].status != "succeeded"
    ]  # fmt: skip
    missing = sum(
        max(0, rows[s.run_id].last_seq - s.seen_seq)
        for s in watched
        if s.run_id in rows and not s.error
    )
    doubled, interrupted = twice(stack, ids)
    by_pid = taken_back_by_pid(stack, held)
    wrongly = len(resumed_at(stack, [run_id for run_id in ids if run_id not in held], killed_at))
    say_errors(watched)
    statuses = sorted({row.status for row in rows.values()})
    print(
        f"[{scenario}] {len(ids)} runs on {workers} worker(s); killed worker {victim} holding "
        f"{len(held)} running runs; ended: {', '.join(statuses)}"
    )
    print(
        f"[{scenario}] time to resume: p50 {percentile(delays, 0.5):.1f} s, max "
        f"{max(delays, default=float('nan')):.1f} s ({len(delays)} of {len(held)} resumed; "
        f"LOOP_STALE_SECONDS {stale}, stale detection's bound {stale + 5} s); {by_pid} taken back "
        "as their worker's pid was gone, the others by its stale heartbeat"
    )
    print(
        f"[{scenario}] runs lost {len(lost)}, tool calls executed twice {doubled} "
        f"({interrupted} answered interrupted), events lost on the sockets {missing}, runs of "
        f"live workers resumed (a live worker taken for dead) {wrongly}"
    )


def taken_back_by_pid(stack: Stack, held: list[int]) -> int:
    """How many of `held` a worker took back because their worker's pid was gone (its log
    says so; code without that never does), rather than by its stale heartbeat."""
    said = "".join(log.read_text(errors="replace") for log in stack.var_dir.glob("worker-*.log"))
    return sum(
        bool(re.search(rf"^Run {run_id}: its worker \S+ is gone", said, re.M)) for run_id in held
    )


def start_supervised(stack: Stack, concurrency: int) -> subprocess.Popen[bytes]:
    """`manage.py worker --supervise`, as `make run` starts it; stopped with the stack's
    workers (the supervisor passes SIGTERM on and waits for its worker)."""
    number = len(stack.workers)
    process = subprocess.Popen(  # noqa: S603
        [sys.executable, "manage.py", "worker", "--supervise", "--concurrency", str(concurrency)],
        cwd=stack.project, env={**stack.env, "PGAPPNAME": f"{WORKER_APP}{number}"},
        stdout=stack.log(f"worker-{number}"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    stack.workers.append(process)
    return process


def start_elsewhere(stack: Stack, concurrency: int) -> subprocess.Popen[bytes]:
    """A plain worker that names itself as a worker of another host would (`elsewhere:PID`), so
    that no worker here can tell by its pid that it died: only its heartbeat can."""
    number = len(stack.workers)
    command = (
        f'exec "{sys.executable}" manage.py worker --concurrency {concurrency} '
        '--name "elsewhere:$$"'
    )
    process = subprocess.Popen(  # noqa: S603
        ["/bin/sh", "-c", command],
        cwd=stack.project, env={**stack.env, "PGAPPNAME": f"{WORKER_APP}{number}"},
        stdout=stack.log(f"worker-{number}"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    stack.workers.append(process)
    return process


def wait_until_workers_listen(stack: Stack, count: int) -> None:
    """Until `count` workers' run slots are registered (each process registers two rows)."""
    deadline = time.monotonic() + 300
    while stack.query("SELECT count(*) FROM procrastinate_workers")[0][0] < 2 * count:
        if time.monotonic() > deadline:
            raise SystemExit("the workers did not start")
        time.sleep(0.2)


def scenario(name: str, stack: Stack, runs: int, concurrency: int, stale: int) -> None:
    stack.stop_workers()
    supervisor = start_supervised(stack, concurrency) if name != "other-host" else None
    workers = 1 if name == "make-run" else 2
    while len(stack.workers) < workers:
        if name == "other-host":
            start_elsewhere(stack, concurrency)
        else:
            stack.start_worker(concurrency)
    wait_until_workers_listen(stack, workers)
    warm_up(stack, f"bench-recovery-{name}-warm-")
    since_run = stack.query("SELECT coalesce(max(id), 0) FROM agent_agentrun")[0][0]
    usernames = stack.create_people(f"bench-recovery-{name}-", runs)
    pid = supervisor.pid if supervisor is not None else None
    watched, kill = asyncio.run(load(stack, usernames, since_run, pid))
    report(name, stack, watched, kill, stale, workers)


def stale_seconds(stack: Stack) -> int:
    """The site's LOOP_STALE_SECONDS, as its own settings have it (set or default)."""
    said = stack.manage(
        "shell", "-c", "from django.conf import settings; print(settings.LOOP_STALE_SECONDS)"
    )
    return int(said.split()[-1])


# Heartbeats under load -----------------------------------------------------------------------


def spin() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy, at this process's priority."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


class HeartbeatWatch:
    """Every heartbeat row read every 0.1 s: each worker's distinct heartbeats, and the oldest
    one seen (by the database's clock, as the recovery judges it)."""

    def __init__(self, stack: Stack) -> None:
        self.db = stack.new_connection()
        self.beats: dict[int, list[float]] = {}
        self.oldest = 0.0
        self.done = False

    def run(self) -> None:
        """Read until `done`; from before the people log in, so the watch covers the load."""
        while not self.done:
            rows = self.db.execute(
                "SELECT id, extract(epoch FROM last_heartbeat), "
                "extract(epoch FROM now() - last_heartbeat) FROM procrastinate_workers"
            ).fetchall()
            for worker, beat, age in rows:
                seen = self.beats.setdefault(worker, [])
                if not seen or seen[-1] != float(beat):
                    seen.append(float(beat))
                self.oldest = max(self.oldest, float(age))
            time.sleep(0.1)
        self.db.close()

    def gaps(self) -> list[float]:
        return [b - a for beats in self.beats.values() for a, b in itertools.pairwise(beats)]


async def load_with_heartbeats(
    stack: Stack, usernames: list[str], watch: HeartbeatWatch
) -> list[Watched]:
    watching = asyncio.create_task(asyncio.to_thread(watch.run))
    people: list[Person] = []
    try:
        people = await log_in_all(stack, usernames)
        return await everyone_sends(people)
    finally:
        watch.done = True
        await watching
        await asyncio.gather(*(person.close() for person in people))


def heartbeats(stack: Stack, runs: int, concurrency: int, hogs: int, stale: int) -> None:
    stack.start_worker(concurrency)
    wait_until_workers_listen(stack, 1)
    warm_up(stack, "bench-heartbeat-warm-")
    usernames = stack.create_people("bench-heartbeat-", runs)
    spinners = [spin() for _ in range(hogs)]
    try:
        started = time.time()
        watch = HeartbeatWatch(stack)
        watched = asyncio.run(load_with_heartbeats(stack, usernames, watch))
        took = time.time() - started
    finally:
        for each in spinners:
            each.kill()
            each.wait()
    ids = [seen.run_id for seen in watched if seen.run_id]
    rows = run_rows(stack, ids)
    done = sum(row.status == "succeeded" for row in rows.values())
    gaps = watch.gaps()
    say_errors(watched)
    print(
        f"[heartbeats] {runs} runs at once on one worker at {concurrency}, {hogs} CPU hogs, "
        f"load average {os.getloadavg()[0]:.1f}: {done} succeeded in {took:.0f} s"
    )
    print(
        f"[heartbeats] due every {stale / 3:.1f} s (LOOP_STALE_SECONDS {stale}): gaps p50 "
        f"{percentile(gaps, 0.5):.2f} s, p99 {percentile(gaps, 0.99):.2f} s, max "
        f"{max(gaps, default=float('nan')):.2f} s ({len(gaps)} gaps); oldest heartbeat seen "
        f"{watch.oldest:.2f} s (dead beyond {stale} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="runs sent at once (20; 64)")
    parser.add_argument("--stale-seconds", type=int, default=0, help="default: the project's")
    parser.add_argument("--latency-ms", type=int, default=500, help="the mock's time per turn")
    parser.add_argument("--concurrency", type=int, default=0, help="per worker (16; 32)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--heartbeats", action="store_true", help="heartbeat gaps under load")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--keep", action="store_true", help="keep the site's directory (logs)")
    options = parser.parse_args()
    settings = {"LOOP_USER_ACTIVE_RUNS": "1000"}
    if options.stale_seconds:
        settings["LOOP_STALE_SECONDS"] = str(options.stale_seconds)
    with running_stack(
        options.project, "worker", latency_ms=options.latency_ms, keep=options.keep, **settings
    ) as stack:
        stale = stale_seconds(stack)
        if options.heartbeats:
            heartbeats(stack, options.runs or 64, options.concurrency or 32, options.hogs, stale)
            return
        for name in options.scenarios.split(","):
            if name not in SCENARIOS:
                raise SystemExit(f"--scenarios: {name!r} is not one of {', '.join(SCENARIOS)}")
            scenario(name, stack, options.runs or 20, options.concurrency or 16, stale)


if __name__ == "__main__":
    main()
