"""What a demo run asks of the database: its statements and commits, by who sends them.

    .venv/bin/python bench/statements.py [--people 10] [--project DIR]

Starts a fresh site as bench/load.py does (bench/_stack.py: daphne, an embedded PostgreSQL of
its own, Redis, the mock model at --latency-ms a turn) and one worker at 16, works a warm-up run,
logs `--people` new users in, then has the server log every statement it executes
(`log_min_duration_statement = 0`, with each session's application name) while they all send the
demo task at one moment and watch it to its end. Counted per run, from the server's log: every
statement executed (a prepared one at each execution), split into the web's sessions and the
workers', and the shapes sent most (numbers and quoted values left out); and, from the server's
own counters, the commits and the rows written per run. The workers' heartbeats and
Procrastinate's looks for jobs during the burst are counted in: they are what the runs cost.
"""

import argparse
import asyncio
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import (
    MAIN_PROJECT,
    WEB_APP,
    WORKER_APP,
    Stack,
    everyone_sends,
    log_in_all,
    running_stack,
)
from bench.load import warm_up

# The log's line for a statement executed: a simple query's, or a prepared one's execution.
EXECUTED = re.compile(
    r"^(?P<app>[^|]*)\|.*duration: (?P<ms>[\d.]+) ms  (?:statement|execute [^:]*): (?P<sql>.*)$"
)
VALUES = re.compile(r"'(?:[^']|'')*'|\$\d+|\b\d+(?:\.\d+)?\b")
SHOWN_SHAPES = 40


def counters(stack: Stack) -> dict[str, int]:
    """The database's commits and rows written so far."""
    ((commits, inserted, updated, deleted),) = stack.query(
        "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
        "WHERE datname = current_database()"
    )
    return {"commits": commits, "rows inserted": inserted, "rows updated": updated,
            "rows deleted": deleted}  # fmt: skip


def logging_statements(stack: Stack, on: bool) -> None:
    assert stack.db is not None
    if on:
        stack.db.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        stack.db.execute("ALTER SYSTEM SET log_line_prefix = '%a|%p|'")
    else:
        stack.db.execute("ALTER SYSTEM RESET log_min_duration_statement")
        stack.db.execute("ALTER SYSTEM RESET log_line_prefix")
    stack.db.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)  # each session reads the new settings at its next statement


def side(app: str) -> str:
    if app == WEB_APP:
        return "web"
    if app.startswith(WORKER_APP):
        return "worker"
    return "other (this bench, the server)"


def shape(sql: str) -> str:
    return " ".join(VALUES.sub("?", sql).split())[:110]


def measure(
    stack: Stack, people: int, keep_log: Path | None = None
) -> tuple[list[tuple[str, str, float]], dict[str, int], int]:
    """The statements executed (who, shape, ms), the counters' growth and the runs finished."""
    stack.start_worker(16)
    try:
        warm_up(stack, "bench-statements-warm-")
        usernames = stack.create_people("bench-statements-", people)

        async def burst() -> int:
            persons = await log_in_all(stack, usernames)
            try:
                log = stack.var_dir / "postgres" / "log"
                logging_statements(stack, on=True)
                start, before = log.stat().st_size, counters(stack)
                watched = await everyone_sends(persons)
                logging_statements(stack, on=False)
                after = counters(stack)
                grown.update({name: after[name] - before[name] for name in after})
                with log.open("rb") as lines:
                    lines.seek(start)
                    text = lines.read().decode(errors="replace")
                if keep_log is not None:
                    keep_log.write_text(text)
                executed.extend(
                    (side(m["app"]), shape(m["sql"]), float(m["ms"]))
                    for m in map(EXECUTED.match, text.splitlines())
                    if m
                )
                return sum(1 for seen in watched if seen.finished_at and not seen.error)
            finally:
                await asyncio.gather(*(person.close() for person in persons))

        executed: list[tuple[str, str, float]] = []
        grown: dict[str, int] = {}
        finished = asyncio.run(burst())
    finally:
        stack.stop_workers()
    return executed, grown, finished


def report(executed: list[tuple[str, str, float]], grown: dict[str, int], runs: int) -> None:
    print(f"{runs} runs finished; per run:")
    by_side = Counter(who for who, _, _ in executed)
    spent = Counter[str]()
    for who, _, ms in executed:
        spent[who] += ms
    for who, count in by_side.most_common():
        print(f"  {who}: {count / runs:.1f} statements, {spent[who] / runs:.2f} ms in the server")
    for name, count in grown.items():
        print(f"  {name}: {count / runs:.1f}")
    for who in by_side:
        print(f"\n{who}, the shapes sent most (per run):")
        shapes = Counter(sql for side_, sql, _ in executed if side_ == who)
        for sql, count in shapes.most_common(SHOWN_SHAPES):
            print(f"  {count / runs:5.2f}  {sql}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--latency-ms", type=int, default=500, help="the mock's time per turn")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--log", type=Path, help="write the server's log of the burst there")
    options = parser.parse_args()
    settings = {"LOOP_USER_ACTIVE_RUNS": "1000"}
    with running_stack(
        options.project, "worker", latency_ms=options.latency_ms, **settings
    ) as stack:
        executed, grown, runs = measure(stack, options.people, options.log)
    if not runs:
        raise SystemExit("no run finished")
    print(f"{options.people} people in {stack.project}, one worker at 16")
    report(executed, grown, runs)


if __name__ == "__main__":
    main()
