"""Many people at once through the real stack: runs per minute, waits, and what the workers hold.

    .venv/bin/python bench/load.py [--people 50] [--concurrency 1,4,16,32] [--workers 1] [--web 1]
    .venv/bin/python bench/load.py --project /work/old --engine db_worker   # the old engine
    .venv/bin/python bench/load.py --approvals [--pairs 1] [--decide-after 5] [--idle-runs 10]
    .venv/bin/python bench/load.py --observers [--pairs 2]   # metrics and traces off and on

Starts a fresh site (bench/_stack.py: daphne, or --web N of them accepting on one port as behind a
reverse proxy, an embedded PostgreSQL of its own, Redis as the
channel layer, the mock model at --latency-ms a turn), then for each concurrency: starts the
workers (`manage.py worker --concurrency C`, or the old `db_worker`, one run at a time), works one
warm-up run (the embedder and the sandbox load once per process), and has `--people` new users
each log in through the login form, open the home page, and all at one moment send the demo task
with the send form and watch it on the conversation page's socket to its end.

Figures per concurrency:
- runs per minute: runs / (last finish seen on a socket - first send) x 60; beside it what the
  model latency alone allows, C x 60 / (turns per run x latency), turns counted in the log, and
  the ratio, and the best ratio a burst of that many runs at once can reach (it is worked in
  ceil(runs / C) waves);
- pickup wait (created_at -> started_at, from the database) p50/p99, and p99 of the runs that
  arrived while a slot was free (fewer runs ahead of them than workers x C); then, after the
  burst, 5 runs sent one at a time to the idle workers: their pickup p50 and max;
- end to end (send -> the socket's marker that the run finished) p50/p99, and how long a run
  holds its slot (started_at -> finished_at), of which before its first step (-> RunStarted: the
  claim and the memory recall);
- live events: how long each event a socket brought took from its `created_at` (stamped by the
  worker just before its INSERT) to its frame's arrival, p50/p99, apart for the events made
  before the page's socket asked to watch (its first read catches them up);
- sockets dropped: a socket the site closes abnormally, or whose handshake it never answers,
  is opened again as the page's script does (htmx's backoff) and counted, not failed;
- events lost: per run, the events in the log beyond what the page and the socket's seq markers
  covered (must be 0); runs failed: not `succeeded`, or not seen to finish (must be 0);
- worker RSS: idle (after the warm-up), peak during the load, and (peak - idle) per run at the
  most runs at once the log shows;
- database sessions at the most (counted by PGAPPNAME: web, workers, all) beside max_connections;
- CPU per run of the web, the workers (their own processes, and their sandboxes: the rest of
  their process trees), the database and the bench's clients, and how busy the whole machine was
  meanwhile (other work included: the machine may be shared).
Each concurrency gets a fresh daphne, so connections left from an earlier one do not count.
Floors (issue 16): at 50 people and C=16, throughput at least 70% of the ideal; pickup p99 under
100 ms when a slot is free.

--observers (issue 43; concurrency 16 unless given) works the same round `--pairs` times with
metrics and traces off and `--pairs` times on, which goes first alternating, on the same site:
on, every process counts in the site's metrics directory (LOOP_METRICS_TOKEN,
PROMETHEUS_MULTIPROC_DIR) and exports spans (OTEL_EXPORTER_OTLP_ENDPOINT) to a local OTLP/HTTP
sink in the bench's process, and a scraper reads /metrics every 5 s as Prometheus would; each
round's figures, then the medians of runs per minute and CPU per run side by side (floor: under
5% of the throughput).

--approvals (issue 29; concurrency 16 unless given) instead works, on the same workers,
`--pairs` times in turn: a round of `--people` runs with no approvals at all, then a round of
`--people` in which 1 person in 2 has asked to decide before run_code runs (the demo's first
call) and a client approves each call `--decide-after` seconds after it asked
(bench/_approvals.py: approvals.decisions.decide, called as the run's owner by a `manage.py shell`
process); then `--idle-runs` such runs sent one at a time to the idle workers. Per pair, side by
side: the runs per minute, pickup p50/p99, end to end and started -> finished of all the first
round's runs, of 1 in 2 of them, of the second round's runs that never waited and of those that
waited; how many runs waited at once and how many others were worked meanwhile (sampled every
0.1 s: a waiting run holds no slot, so both together may exceed the slots); the time from each
decision (ApprovalRequest.decided_at) to its call's start (its ToolCallStarted) p50/p99, and to
the run's claim, under the load and one at a time; and the load average.
"""

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._approvals import (
    SIDE_HEADER,
    Approver,
    SlotSampler,
    ask_before_run_code,
    decision_lines,
    decisions,
    side,
)
from bench._observers import Sink, otlp_sink, site_environment
from bench._stack import (
    ENGINES,
    MAIN_PROJECT,
    TERMINAL,
    RunRow,
    Stack,
    Watched,
    event_latencies,
    everyone_sends,
    log_in_all,
    percentile,
    rss_mb,
    run_rows,
    running_stack,
    say_errors,
)


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and of the children it has waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(pid: int) -> float:
    """CPU time of the process itself, without its children's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(value) for value in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """The process and every live process under it (sandboxes, database backends)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu(roots: list[int]) -> float:
    """CPU of process trees: each live process's own and its waited-for children's (a process
    that ended is counted in its parent's)."""
    return sum(cpu_seconds(pid) for root in roots for pid in descendants(root))


def machine_times() -> tuple[float, float]:
    """The machine's CPU time so far, in seconds: busy, and all (every process on it)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = values[3] + values[4]  # idle and iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / ticks, sum(values) / ticks


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


class CpuMeter:
    """CPU spent between start() and stop() by the web, the workers (with their sandboxes), the
    database server and this bench's own clients, and how busy the whole machine was."""

    def __init__(self, stack: Stack) -> None:
        assert stack.web is not None
        self.roots = {
            "web": stack.web_pids,
            "workers": [process.pid for process in stack.workers],
            "database": [stack.postmaster()],
        }
        self.used: dict[str, float] = {}
        self.worker_processes = 0.0
        self.busy = self.machine_busy = float("nan")

    def start(self) -> None:
        self.before = {name: tree_cpu(roots) for name, roots in self.roots.items()}
        self.before["clients"] = own_cpu()
        self.before["worker processes"] = self.workers_own()
        self.machine = machine_times()

    def stop(self) -> None:
        for name, roots in self.roots.items():
            self.used[name] = tree_cpu(roots) - self.before[name]
        self.used["clients"] = own_cpu() - self.before["clients"]
        # The workers' own processes; the rest of their trees is their sandboxes (and the
        # embedded server's keeper, which idles).
        self.worker_processes = self.workers_own() - self.before["worker processes"]
        busy, total = (now - then for now, then in zip(machine_times(), self.machine, strict=True))
        self.machine_busy = busy
        self.busy = busy / total if total else float("nan")

    def workers_own(self) -> float:
        return sum(own_cpu_seconds(pid) for pid in self.roots["workers"])


@dataclass
class Figures:
    concurrency: int
    runs: int
    per_minute: float
    ideal: float
    turns: float
    pickup_p50: float
    pickup_p99: float
    free_slot_p99: float
    free_slot_runs: int
    e2e_p50: float
    e2e_p99: float
    before_step_p50: float  # started_at -> RunStarted: the claim and the recall
    slot_p50: float  # started_at -> finished_at: how long a run holds its slot
    lost: int
    failed: int
    reconnects: int  # sockets the site dropped, opened again as the page's script does
    rss_idle: float
    rss_peak: float
    most_at_once: int
    events: list[float] = field(default_factory=list)  # live events' latencies (s)
    caught_up: list[float] = field(default_factory=list)  # made before the socket watched
    sessions: tuple[int, int, int] = (0, 0, 0)  # database sessions at most: web, workers, all
    max_connections: int = 0
    cpu: CpuMeter | None = None
    alone: list[float] = field(default_factory=list)  # pickup waits of runs sent one by one

    def burst_bound(self, latency: float) -> float:
        """What share of the ideal a burst of `runs` at once can reach at best: it is worked
        in ceil(runs / C) waves of a run's model time each, the last wave maybe part full."""
        if not self.runs or not self.turns:
            return float("nan")
        waves = math.ceil(self.runs / self.concurrency)
        best = self.runs / (waves * self.turns * latency) * 60
        return best / self.ideal

    def lines(self, latency: float) -> list[str]:
        per_run = (self.rss_peak - self.rss_idle) / max(1, self.most_at_once)
        ratio = self.per_minute / self.ideal if self.ideal else float("nan")
        return [
            f"concurrency {self.concurrency}: {self.runs} runs, {self.per_minute:.1f} runs/min; "
            f"model latency alone allows {self.ideal:.1f} ({self.concurrency} x 60 / "
            f"({self.turns:g} turns x {latency:g} s)): {ratio:.0%}; a burst of {self.runs} "
            f"allows at most {self.burst_bound(latency):.0%} of that",
            f"  pickup wait p50 {self.pickup_p50 * 1000:.0f} ms, p99 {self.pickup_p99 * 1000:.0f} "
            f"ms; with a free slot p99 {self.free_slot_p99 * 1000:.0f} ms "
            f"({self.free_slot_runs} runs)",
            *self.alone_line(),
            f"  end to end p50 {self.e2e_p50:.2f} s, p99 {self.e2e_p99:.2f} s; a run holds its "
            f"slot p50 {self.slot_p50:.2f} s, of which {self.before_step_p50:.2f} s before its "
            f"first step",
            f"  live events: {len(self.events)} reached the pages in p50 "
            f"{percentile(self.events, 0.5) * 1000:.0f} ms, p99 "
            f"{percentile(self.events, 0.99) * 1000:.0f} ms (created_at -> on the socket); "
            f"{len(self.caught_up)} made before the page's socket watched, caught up in p50 "
            f"{percentile(self.caught_up, 0.5) * 1000:.0f} ms, p99 "
            f"{percentile(self.caught_up, 0.99) * 1000:.0f} ms",
            f"  events lost {self.lost}, runs failed {self.failed}; sockets dropped and opened "
            f"again by the page {self.reconnects}",
            f"  worker RSS idle {self.rss_idle:.0f} MB, peak {self.rss_peak:.0f} MB, "
            f"{per_run:.1f} MB per run at {self.most_at_once} at once",
            f"  database sessions at most: web {self.sessions[0]}, workers {self.sessions[1]}, "
            f"all {self.sessions[2]} (max_connections {self.max_connections})",
            *self.cpu_line(),
        ]

    def alone_line(self) -> list[str]:
        if not self.alone:
            return []
        return [
            f"  pickup wait of {len(self.alone)} runs sent one at a time to an idle worker: p50 "
            f"{percentile(self.alone, 0.5) * 1000:.0f} ms, max {max(self.alone) * 1000:.0f} ms"
        ]

    def cpu_line(self) -> list[str]:
        if self.cpu is None or not self.runs:
            return []
        used = self.cpu.used
        ours = sum(used.values()) / self.cpu.machine_busy if self.cpu.machine_busy else 0
        each = ", ".join(f"{name} {seconds / self.runs:.3f} s" for name, seconds in used.items())
        sandboxes = used["workers"] - self.cpu.worker_processes
        each += (
            f" (workers: their processes {self.cpu.worker_processes / self.runs:.3f} s, "
            f"sandboxes {sandboxes / self.runs:.3f} s)"
        )
        return [
            f"  CPU per run: {each}; the machine ({os.cpu_count()} cores) was "
            f"{self.cpu.busy:.0%} busy meanwhile, {ours:.0%} of that this bench's stack"
        ]


class Sampler:
    """Every 0.2 s, in a thread: the workers' resident memory (summed) and the database
    sessions of the web, the workers and all; keeps the peaks."""

    def __init__(self, stack: Stack, pids: list[int]) -> None:
        self.stack = stack
        self.pids = pids
        self.peak = 0.0
        self.sessions = (0, 0, 0)  # the most at once of web, workers, all
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def now(self) -> float:
        return sum(rss_mb(pid) for pid in self.pids)

    def sample(self) -> None:
        with self.stack.new_connection() as db:
            while not self.stopped.wait(0.2):
                self.peak = max(self.peak, self.now())
                now = self.stack.connections(db)
                self.sessions = tuple(map(max, self.sessions, now))  # type: ignore[assignment]

    def __enter__(self) -> "Sampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()
        self.peak = max(self.peak, self.now())


def most_at_once(rows: list[RunRow]) -> int:
    """The most runs being worked at one moment (started, not yet finished)."""
    edges = sorted(
        [(row.started_at, 1) for row in rows if row.started_at and row.finished_at]
        + [(row.finished_at, -1) for row in rows if row.started_at and row.finished_at]
    )
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def free_slot_waits(rows: list[RunRow], capacity: int) -> list[float]:
    """Pickup waits of the runs that arrived with fewer than `capacity` runs ahead of them
    (queued or running): a worker had a slot free for them at once."""
    waits = []
    for row in rows:
        if row.started_at is None:
            continue
        ahead = sum(
            1
            for other in rows
            if other is not row
            and other.created_at <= row.created_at
            and (other.finished_at is None or other.finished_at > row.created_at)
        )
        if ahead < capacity:
            waits.append(row.started_at - row.created_at)
    return waits


def warm_up(stack: Stack, name: str) -> None:
    """One run first, so each worker has loaded what it loads once (the embedder, a warm
    sandbox) before memory and times are measured."""
    usernames = stack.create_people(name, len(stack.workers))
    watched = asyncio.run(one_round(stack, usernames))
    bad = [seen for seen in watched if seen.error or not seen.finished_at]
    if bad:
        raise SystemExit(f"the warm-up run did not finish: {bad[0]}")


async def one_round(
    stack: Stack, usernames: list[str], cpu: CpuMeter | None = None
) -> list[Watched]:
    """Everyone logs in, then all send at once and watch (the CPU meter runs for that part)."""
    people = await log_in_all(stack, usernames)
    try:
        if cpu is not None:
            cpu.start()
        watched = await everyone_sends(people)
        if cpu is not None:
            cpu.stop()
        return watched
    finally:
        await asyncio.gather(*(person.close() for person in people))


ALONE_RUNS = 5


def measure(stack: Stack, concurrency: int, people: int, workers: int, latency: float) -> Figures:
    """One concurrency: a fresh daphne (its connections from earlier rounds gone) and workers."""
    stack.restart_web()
    for _ in range(workers):
        stack.start_worker(concurrency)
    try:
        warm_up(stack, f"bench-warm-c{concurrency}-")
        usernames = stack.create_people(f"bench-load-c{concurrency}-", people)
        pids = [process.pid for process in stack.workers]
        cpu = CpuMeter(stack)
        with Sampler(stack, pids) as sampled:
            idle = sampled.now()
            watched = asyncio.run(one_round(stack, usernames, cpu))
        rows = settled_rows(stack, watched)
        alone = one_at_a_time(stack, f"bench-alone-c{concurrency}-", ALONE_RUNS)
    finally:
        stack.stop_workers()
    result = figures(watched, rows, concurrency, workers, latency, idle, sampled.peak)
    result.events, result.caught_up = event_latencies(stack, watched)
    result.sessions = sampled.sessions
    result.cpu = cpu
    result.alone = alone
    return result


def settled_rows(stack: Stack, watched: list[Watched], timeout: float = 60) -> dict[int, RunRow]:
    """The round's runs as the database has them once all have ended (or `timeout` passed): a
    page can see a run's end a moment before its row says so."""
    waited_for = time.monotonic() + timeout
    ids = [seen.run_id for seen in watched if seen.run_id]
    rows = run_rows(stack, ids)
    while any(row.status not in TERMINAL for row in rows.values()):
        if time.monotonic() > waited_for:
            break
        time.sleep(0.5)
        rows = run_rows(stack, ids)
    return rows


def one_at_a_time(stack: Stack, prefix: str, count: int) -> list[float]:
    """Pickup waits of runs sent by one person at a time to idle workers, each after the last
    has ended: what a worker with a free slot takes to start a run, with no burst around it."""
    waits = []
    for name in stack.create_people(prefix, count):
        (seen,) = asyncio.run(one_round(stack, [name]))
        row = run_rows(stack, [seen.run_id]).get(seen.run_id) if seen.run_id else None
        if row is not None and row.started_at is not None:
            waits.append(row.started_at - row.created_at)
    return waits


def measure_approvals(stack: Stack, concurrency: int, options: argparse.Namespace) -> None:
    """`--pairs` pairs of rounds on the same workers, then runs one at a time: `--people` runs
    with no approvals at all, then `--people` of which 1 in 2 waits for a decision (their people
    ask before run_code, a client approves `--decide-after` seconds after each call asked); then
    `--idle-runs` waiting runs sent one at a time to the idle workers. Printed as each ends: what
    the runs of each round were worked at, and how soon each decision's call started."""
    stack.restart_web()
    for _ in range(options.workers):
        stack.start_worker(concurrency)
    try:
        warm_up(stack, f"bench-warm-a{concurrency}-")
        idle = stack.create_people(f"bench-idle-c{concurrency}-", options.idle_runs)
        ask_before_run_code(stack, idle)
        with Approver(stack, options.decide_after) as approver:
            for pair in range(1, options.pairs + 1):
                approval_pair(stack, concurrency, pair, options)
            alone = [alone_round(stack, name) for name in idle]
    finally:
        stack.stop_workers()
    say_errors(alone)
    label = f"{len(alone)} runs one at a time, idle worker"
    lines = decision_lines(label, decisions(stack, [seen.run_id for seen in alone]))
    lines.append(
        f"  decisions refused: {len(approver.refused)} {approver.refused[:3]}; load average "
        f"{load_average()} at the end"
    )
    print("\n".join(lines), flush=True)


def approval_pair(stack: Stack, concurrency: int, pair: int, options: argparse.Namespace) -> None:
    """A round with no approvals, then one in which 1 person in 2 asks before run_code, each
    of `--people` new people (the Approver is deciding); their figures printed."""
    plain = stack.create_people(f"bench-plain-c{concurrency}-{pair}-", options.people)
    asks = stack.create_people(f"bench-asks-c{concurrency}-{pair}-", options.people)
    asking = set(asks[::2])
    ask_before_run_code(stack, sorted(asking))
    without, without_rows, _ = sampled_round(stack, plain)
    load_without = load_average()
    with_, with_rows, slots = sampled_round(stack, asks)
    load_with = load_average()
    waited = [seen for seen in with_ if seen.username in asking]
    never = [seen for seen in with_ if seen.username not in asking]
    start_without = min(seen.sent_at for seen in without)
    start_with = min(seen.sent_at for seen in with_)
    after = options.decide_after
    lines = [
        f"  pair {pair}: load average {load_without} after the round with no approvals, "
        f"{load_with} after the one with",
        SIDE_HEADER,
        side("no approvals: all runs", without, without_rows, start_without).line(),
        side("no approvals: 1 run in 2", without[1::2], without_rows, start_without).line(),
        side("approvals: the runs that never waited", never, with_rows, start_with).line(),
        side(f"approvals: the runs that waited {after:g} s", waited, with_rows, start_with).line(),
        slots.line(concurrency * options.workers),
        *decision_lines("under the load", decisions(stack, [seen.run_id for seen in waited])),
    ]
    print("\n".join(lines), flush=True)
    say_errors(without + with_)


def sampled_round(
    stack: Stack, usernames: list[str]
) -> tuple[list[Watched], dict[int, RunRow], SlotSampler]:
    """Everyone sends at once and watches to the end, the runs' slots sampled meanwhile."""
    with SlotSampler(stack) as slots:
        watched = asyncio.run(one_round(stack, usernames))
    return watched, settled_rows(stack, watched), slots


def alone_round(stack: Stack, username: str) -> Watched:
    """One person's run, to its end in the database (the next one finds the workers idle)."""
    (seen,) = asyncio.run(one_round(stack, [username]))
    settled_rows(stack, [seen])
    return seen


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def figures(
    watched: list[Watched],
    rows: dict[int, RunRow],
    concurrency: int,
    workers: int,
    latency: float,
    idle: float,
    peak: float,
) -> Figures:
    effective = concurrency if len(rows) and workers else 1
    finished = [seen for seen in watched if seen.finished_at]
    span = max(s.finished_at for s in finished) - min(s.sent_at for s in watched) if finished else 0
    done = list(rows.values())
    turns = statistics.mean(row.turns for row in done) if done else 0
    pickups = [row.started_at - row.created_at for row in done if row.started_at]
    ends = [seen.finished_at - seen.sent_at for seen in finished]
    worked = [row for row in done if row.started_at and row.finished_at and row.first_step_at]
    lost = sum(  # on the sockets that worked: one the site refused is a failed run instead
        max(0, rows[s.run_id].last_seq - s.seen_seq)
        for s in watched
        if s.run_id in rows and not s.error
    )
    failed = sum(
        1
        for seen in watched
        if seen.error
        or not seen.finished_at
        or seen.run_id not in rows
        or rows[seen.run_id].status != "succeeded"
    )
    say_errors(watched)
    capacity = effective * workers
    free = free_slot_waits(done, capacity)
    return Figures(
        concurrency=capacity,
        runs=len(finished),
        per_minute=len(finished) / span * 60 if span else 0.0,
        ideal=capacity * 60 / (turns * latency) if turns and latency else float("nan"),
        turns=round(turns, 2),
        pickup_p50=percentile(pickups, 0.5),
        pickup_p99=percentile(pickups, 0.99),
        free_slot_p99=percentile(free, 0.99),
        free_slot_runs=len(free),
        e2e_p50=percentile(ends, 0.5),
        e2e_p99=percentile(ends, 0.99),
        before_step_p50=percentile([r.first_step_at - r.started_at for r in worked], 0.5),
        slot_p50=percentile([r.finished_at - r.started_at for r in worked], 0.5),
        lost=lost,
        failed=failed,
        reconnects=sum(seen.reconnects for seen in watched),
        rss_idle=idle,
        rss_peak=peak,
        most_at_once=most_at_once(done),
    )


def measure_observers(
    stack: Stack, concurrency: int, options: argparse.Namespace, sink: str
) -> None:
    """The same load with metrics and traces off and on (issue 43's floor: under 5% of the
    throughput), `--pairs` times, which goes first alternating: on, every process counts in the
    site's metrics directory and exports spans to a local OTLP sink, and a scraper reads
    /metrics every 5 s as Prometheus would. Each round's figures, then the medians side by side."""
    latency = options.latency_ms / 1000
    off_env = dict(stack.env)
    on_env = off_env | site_environment(stack.var_dir, sink)
    rounds: dict[bool, list[Figures]] = {False: [], True: []}
    for pair in range(options.pairs):
        for on in (False, True) if pair % 2 == 0 else (True, False):
            stack.env.clear()
            stack.env.update(on_env if on else off_env)
            print(f"metrics and traces {'on' if on else 'off'} (pair {pair + 1}):", flush=True)
            exported = Sink.exports
            with scraping(stack, on_env["LOOP_METRICS_TOKEN"], on) as scrapes:
                result = measure(stack, concurrency, options.people, options.workers, latency)
            result.max_connections = int(stack.query("SHOW max_connections")[0][0])
            print("\n".join(result.lines(latency)), flush=True)
            if on:
                print(
                    f"  /metrics scraped {scrapes[0]} times; the OTLP sink took "
                    f"{Sink.exports - exported} exports",
                    flush=True,
                )
            rounds[on].append(result)
    stack.env.clear()
    stack.env.update(off_env)
    print_observed(rounds)


def print_observed(rounds: dict[bool, list[Figures]]) -> None:
    def median(on: bool, figure: Callable[[Figures], float]) -> float:
        return statistics.median(figure(result) for result in rounds[on])

    def cpu(result: Figures) -> float:
        used = result.cpu.used if result.cpu is not None else {}
        return sum(used.values()) / max(1, result.runs)

    for name, figure in (("runs/min", lambda r: r.per_minute), ("CPU s a run, all", cpu)):
        off, on = median(False, figure), median(True, figure)
        print(f"{name:<18} off {off:.3f}  on {on:.3f}  on/off {on / off:.3f}x")


@contextlib.contextmanager
def scraping(stack: Stack, token: str, on: bool) -> Iterator[list[int]]:
    """While a round goes, /metrics read every 5 s with the token (when `on`); how many reads."""
    scrapes = [0]
    done = threading.Event()

    def scrape() -> None:
        while not done.wait(0 if scrapes[0] == 0 else 5):
            with contextlib.suppress(httpx2.HTTPError):
                answer = httpx2.get(
                    f"{stack.url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10
                )
                scrapes[0] += answer.status_code == 200

    scraper = threading.Thread(target=scrape, daemon=True)
    if on:
        scraper.start()
    try:
        yield scrapes
    finally:
        done.set()
        if on:
            scraper.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=50)
    parser.add_argument(
        "--concurrency", default="", help="comma-separated (default 1,4,16,32; 16 --approvals)"
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--web", type=int, default=1,
        help="daphne processes sharing the port (each uses one core at most)",
    )  # fmt: skip
    parser.add_argument(
        "--production", action="store_true",
        help="DEBUG=false behind a TLS proxy (emulated by the clients), as docs/deploy.md runs it",
    )  # fmt: skip
    parser.add_argument("--latency-ms", type=int, default=500, help="the mock's time per turn")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--engine", choices=ENGINES, default="worker")
    parser.add_argument("--keep", action="store_true", help="keep the site's directory (logs)")
    parser.add_argument(
        "--max-connections", type=int, default=0,
        help="the embedded server's max_connections (default: as the site sets it up)",
    )  # fmt: skip
    parser.add_argument(
        "--approvals", action="store_true",
        help="half of the runs wait for a decision, beside a round with no approvals",
    )  # fmt: skip
    parser.add_argument(
        "--decide-after", type=float, default=5.0,
        help="--approvals: seconds from a call's asking to its approval",
    )  # fmt: skip
    parser.add_argument(
        "--pairs", type=int, default=1,
        help="--approvals: rounds without and with approvals, in turn, this many times each",
    )  # fmt: skip
    parser.add_argument(
        "--idle-runs", type=int, default=10,
        help="--approvals: waiting runs then sent one at a time to the idle workers",
    )  # fmt: skip
    parser.add_argument(
        "--observers", action="store_true",
        help="each round with metrics and traces off and on (--pairs times), side by side",
    )  # fmt: skip
    options = parser.parse_args()
    if options.approvals and options.engine != "worker":
        parser.error("--approvals needs the worker engine (db_worker has no approvals)")
    default = "16" if options.approvals or options.observers else "1,4,16,32"
    levels = [int(c) for c in (options.concurrency or default).split(",")]
    if options.engine == "db_worker":
        levels = [1]  # db_worker works one task at a time
    latency = options.latency_ms / 1000
    settings = {"LOOP_USER_ACTIVE_RUNS": "1000"}
    with otlp_sink() as sink, running_stack(
        options.project, options.engine, latency_ms=options.latency_ms, keep=options.keep,
        max_connections=options.max_connections, web_processes=options.web,
        production=options.production, **settings,
    ) as stack:  # fmt: skip
        print(
            f"{options.people} people, {options.web} x daphne"
            f"{' (DEBUG=false, behind a TLS proxy)' if options.production else ''}, "
            f"{options.workers} x "
            f"`{options.engine}` in "
            f"{stack.project}, mock at {options.latency_ms} ms a turn"
        )
        for concurrency in levels:
            if options.approvals:
                print(
                    f"concurrency {concurrency} x {options.workers} worker(s), load average "
                    f"{load_average()}: {options.pairs} x (a round with no approvals, then one "
                    f"in which 1 person in 2 asks before run_code, approved "
                    f"{options.decide_after:g} s after each call asked), then "
                    f"{options.idle_runs} such runs one at a time",
                    flush=True,
                )
                measure_approvals(stack, concurrency, options)
                continue
            if options.observers:
                measure_observers(stack, concurrency, options, sink)
                continue
            result = measure(stack, concurrency, options.people, options.workers, latency)
            result.max_connections = int(stack.query("SHOW max_connections")[0][0])
            print("\n".join(result.lines(latency)), flush=True)


if __name__ == "__main__":
    main()
