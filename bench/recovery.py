"""A worker killed in the middle of the load: how soon its runs go on elsewhere, and that none is
lost or does a tool call twice.

    .venv/bin/python bench/recovery.py [--runs 20] [--stale-seconds 30] [--latency-ms 500]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis, the mock
at --latency-ms a turn) and two `manage.py worker` processes (each at LOOP_WORKER_CONCURRENCY),
works one warm-up run, then has --runs people log in and all send the demo task at once and watch
it on the page's socket. As soon as a tool call of the load has finished, the worker holding the
most running runs is killed with SIGKILL (no hand-back, as an OOM kill or a lost machine).

Figures:
- time to resume, p50 and max: from the kill to the RunResumed event of each run the killed
  worker held (floor: under LOOP_STALE_SECONDS + 5 s);
- runs lost: runs that did not end `succeeded` or were not seen to finish on their page (0);
- tool calls executed twice: ToolExecution rows per (run, call_id) beyond one, not counting the
  `interrupted` answer a resumed run records for a call that never finished (0);
- events lost on the pages' sockets, as bench/load.py counts them (0).
"""

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import (
    MAIN_PROJECT,
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

WORKERS = 2
Kill = tuple[int, float, list[int]]  # the killed worker's pid, when, and the runs it held


def holders(stack: Stack) -> dict[int, int]:
    """Per worker pid: how many runs it is working now (the run's `worker` names its pid)."""
    rows = stack.query("SELECT worker FROM agent_agentrun WHERE status = 'running'")
    counts = {process.pid: 0 for process in stack.workers}
    for (worker,) in rows:
        for pid in counts:
            if f":{pid}" in worker:
                counts[pid] += 1
    return counts


def calls_finished(stack: Stack, since_run: int) -> int:
    rows = stack.query(
        "SELECT count(*) FROM agent_runevent WHERE run_id > %s AND kind = 'tool_call_finished'",
        (since_run,),
    )
    return rows[0][0]


async def kill_mid_load(stack: Stack, since_run: int) -> Kill:
    """Wait until the load has finished a tool call, then SIGKILL the worker holding the most
    running runs; its pid, the moment of the kill, and the runs it held."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if await asyncio.to_thread(calls_finished, stack, since_run):
            counts = await asyncio.to_thread(holders, stack)
            victim = max(counts, key=counts.__getitem__)
            if counts[victim]:
                held = await asyncio.to_thread(runs_of, stack, victim)
                os.kill(victim, signal.SIGKILL)
                return victim, time.time(), held
        await asyncio.sleep(0.02)
    raise SystemExit("no worker held a running run with a finished tool call")


def runs_of(stack: Stack, pid: int) -> list[int]:
    rows = stack.query("SELECT id, worker FROM agent_agentrun WHERE status = 'running'")
    return [run_id for run_id, worker in rows if f":{pid}" in worker]


async def load(stack: Stack, usernames: list[str], since_run: int) -> tuple[list[Watched], Kill]:
    people = await log_in_all(stack, usernames)
    try:
        killing = asyncio.create_task(kill_mid_load(stack, since_run))
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
    stack: Stack, watched: list[Watched], victim: int, killed_at: float, held: list[int]
) -> None:
    ids = [seen.run_id for seen in watched if seen.run_id]
    rows = run_rows(stack, ids)
    resumed = resumed_at(stack, held, killed_at)
    delays = [resumed[run_id] - killed_at for run_id in held if run_id in resumed]
    stale = int(stack.env.get("LOOP_STALE_SECONDS", "30"))
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
    say_errors(watched)
    statuses = sorted({row.status for row in rows.values()})
    print(
        f"{len(ids)} runs on {WORKERS} workers; killed worker {victim} holding {len(held)} running "
        f"runs; ended: {', '.join(statuses)}"
    )
    print(
        f"time to resume: p50 {percentile(delays, 0.5):.1f} s, max "
        f"{max(delays, default=float('nan')):.1f} s ({len(delays)} of {len(held)} resumed; "
        f"floor LOOP_STALE_SECONDS + 5 = {stale + 5} s)"
    )
    print(f"runs lost {len(lost)}, tool calls executed twice {doubled} ({interrupted} answered "
          f"interrupted), events lost on the sockets {missing}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stale-seconds", type=int, default=30, help="LOOP_STALE_SECONDS")
    parser.add_argument("--latency-ms", type=int, default=500, help="the mock's time per turn")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--keep", action="store_true", help="keep the site's directory (logs)")
    options = parser.parse_args()
    settings = {"LOOP_USER_ACTIVE_RUNS": "1000", "LOOP_STALE_SECONDS": str(options.stale_seconds)}
    with running_stack(
        options.project, "worker", latency_ms=options.latency_ms, keep=options.keep, **settings
    ) as stack:
        for _ in range(WORKERS):
            stack.start_worker(int(stack.env.get("LOOP_WORKER_CONCURRENCY", "16")))
        warm_up(stack, "bench-recovery-warm-")
        since_run = stack.query("SELECT coalesce(max(id), 0) FROM agent_agentrun")[0][0]
        usernames = stack.create_people("bench-recovery-", options.runs)
        watched, (victim, killed_at, held) = asyncio.run(load(stack, usernames, since_run))
        report(stack, watched, victim, killed_at, held)


if __name__ == "__main__":
    main()
