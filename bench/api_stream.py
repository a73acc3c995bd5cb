"""How fast a run's events reach programs over the API's SSE stream, beside the page's socket, in
one run of the real stack.

    .venv/bin/python bench/api_stream.py [--clients 100] [--sockets 100] [--runs 10]
                                         [--latency-ms 200]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis as the
channel layer, the mock model at --latency-ms a turn), makes `--runs` people, each with an API
key and logged in through the login form, queues one demo run for each through POST
/api/v1/runs, then opens `--clients` SSE streams (GET /api/v1/runs/{id}/events, spread evenly
over the runs, each with its run's owner's key) and `--sockets` page websockets (the chat page's
socket, logged in as the owner, as bench/_stack.Person watches), and only then starts one worker.
Each client notes when each event arrived; latency is arrival minus the event's `created_at`,
stamped by the worker just before its INSERT (one machine, one clock). Events lost: per client,
the events of its run it never got (must be 0 for both).
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2

from bench._stack import (
    DEMO_TASK,
    MAIN_PROJECT,
    WAIT,
    Person,
    Stack,
    Watched,
    log_in_all,
    percentile,
    running_stack,
)

PREFIX = "bench-sse-"


@dataclass
class Streamed:
    """What one SSE client saw of its run: when each stored event arrived, and its end."""

    run_id: int
    arrivals: dict[int, float] = field(default_factory=dict)
    deltas: int = 0
    duplicates: int = 0
    ended: str = ""
    error: str = ""


def make_keys(stack: Stack, usernames: list[str]) -> dict[str, str]:
    """An API key with every scope for each person (its secret, as a program shows it)."""
    script = (
        "import json\n"
        "from django.contrib.auth.models import User\n"
        "from api.keys import create_key\n"
        "from api.models import ALL_SCOPES\n"
        f"names = json.loads({json.dumps(json.dumps(usernames))})\n"
        "keys = {n: create_key(User.objects.get(username=n), 'bench', ALL_SCOPES).secret "
        "for n in names}\n"
        "print('KEYS' + json.dumps(keys))\n"
    )
    out = stack.manage("shell", "-c", script)
    return json.loads(out.split("KEYS", 1)[1])


async def queue_run(stack: Stack, key: str) -> int:
    async with httpx2.AsyncClient(base_url=stack.url, timeout=WAIT) as client:
        answer = await client.post(
            "/api/v1/runs", json={"task": DEMO_TASK}, headers={"Authorization": f"Bearer {key}"}
        )
        if answer.status_code != 201:
            raise SystemExit(f"POST /api/v1/runs answered {answer.status_code}: {answer.text}")
        return int(answer.json()["id"])


async def stream(
    client: httpx2.AsyncClient, key: str, seen: Streamed, ready: asyncio.Event
) -> None:
    """Follow the run's SSE stream to its `end`, noting each stored event's arrival."""
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    try:
        async with client.stream(
            "GET", f"/api/v1/runs/{seen.run_id}/events", headers=headers
        ) as answer:
            if answer.status_code != 200:
                seen.error = f"{answer.status_code}: {(await answer.aread())[:200]!r}"
                return
            ready.set()
            event = ""
            async for line in answer.aiter_lines():
                if line.startswith("id: "):
                    seq = int(line[4:])
                    if seq in seen.arrivals:
                        seen.duplicates += 1
                    seen.arrivals.setdefault(seq, time.time())
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "delta":
                    seen.deltas += 1
                elif line.startswith("data: ") and event == "end":
                    seen.ended = json.loads(line[6:])["status"]
                    return
    except Exception as error:  # counted and said, as a failed client
        seen.error = f"{type(error).__name__}: {error}"
    finally:
        ready.set()


async def socket(person: Person, seen: Watched, ready: asyncio.Event) -> None:
    """The page's socket, as bench/_stack.Person watches it (from seq 0: nothing is shown)."""
    task = asyncio.create_task(person.watch(seen))
    while not seen.watching_since and not task.done():
        await asyncio.sleep(0.01)
    ready.set()
    try:
        await task
    except Exception as error:  # counted and said, as a failed client
        seen.error = f"{type(error).__name__}: {error}"


async def bench(
    stack: Stack, clients: int, sockets: int, runs: int
) -> tuple[list[Streamed], list[Watched], list[int]]:
    names = stack.create_people(PREFIX, runs)
    keys = make_keys(stack, names)
    people = await log_in_all(stack, names)
    run_ids = [await queue_run(stack, keys[name]) for name in names]
    streamed = [Streamed(run_ids[n % runs]) for n in range(clients)]
    watched = [Watched(names[n % runs], run_id=run_ids[n % runs]) for n in range(sockets)]
    readies = [asyncio.Event() for _ in range(clients + sockets)]
    limits = httpx2.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    async with httpx2.AsyncClient(base_url=stack.url, timeout=WAIT, limits=limits) as client:
        tasks = [
            asyncio.create_task(stream(client, keys[names[n % runs]], streamed[n], readies[n]))
            for n in range(clients)
        ]
        tasks += [
            asyncio.create_task(socket(people[n % runs], watched[n], readies[clients + n]))
            for n in range(sockets)
        ]
        await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in readies)), WAIT)
        stack.start_worker(16)
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    for person in people:
        await person.close()
    return streamed, watched, run_ids


def figures(name: str, latencies: list[float], lost: int, failed: int) -> str:
    if not latencies:
        return f"{name:>10}: no events ({failed} clients failed)"
    ms = [value * 1000 for value in latencies]
    return (
        f"{name:>10}: p50 {statistics.median(ms):7.1f} ms   p99 {percentile(ms, 0.99):7.1f} ms   "
        f"max {max(ms):7.1f} ms   {len(ms):6d} events   {lost} lost   {failed} failed"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100, help="SSE clients")
    parser.add_argument("--sockets", type=int, default=100, help="page websockets")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--latency-ms", type=int, default=200)
    options = parser.parse_args()
    with running_stack(
        MAIN_PROJECT,
        "worker",
        latency_ms=options.latency_ms,
        LOOP_API_STREAMS_PER_PERSON=str(options.clients),
        LOOP_API_KEY_REQUESTS_PER_MINUTE="100000",
        LOOP_API_PERSON_REQUESTS_PER_MINUTE="100000",
    ) as stack:
        streamed, watched, run_ids = asyncio.run(
            bench(stack, options.clients, options.sockets, options.runs)
        )
        rows = stack.query(
            "SELECT run_id, seq, extract(epoch FROM created_at), kind FROM agent_runevent "
            "WHERE run_id = ANY(%s)",
            (run_ids,),
        )
        statuses = stack.query(
            "SELECT status, count(*) FROM agent_agentrun WHERE id = ANY(%s) GROUP BY 1",
            (run_ids,),
        )
    created = {(run, seq): float(at) for run, seq, at, _ in rows}
    kinds = {(run, seq): kind for run, seq, _, kind in rows}
    per_run = {run: sum(1 for r, _ in created if r == run) for run in run_ids}

    sse = [at - created[(s.run_id, seq)] for s in streamed for seq, at in s.arrivals.items()]
    sse_lost = sum(per_run[s.run_id] - len(s.arrivals) for s in streamed)
    sse_failed = sum(1 for s in streamed if s.error or not s.ended)
    page = [
        at - created[(w.run_id, seq)]
        for w in watched
        for seq, (at, _) in w.arrivals.items()
        if (w.run_id, seq) in created
    ]
    page_lost = sum(per_run[w.run_id] - len(w.arrivals) for w in watched)
    page_failed = sum(1 for w in watched if w.error or not w.finished_at)
    print(
        f"{options.runs} runs ({', '.join(f'{n} {s}' for s, n in statuses)}), mock model at "
        f"{options.latency_ms} ms a turn, Redis channel layer; persist -> arrival:"
    )
    print(figures(f"SSE x{options.clients}", sse, sse_lost, sse_failed))
    print(figures(f"page x{options.sockets}", page, page_lost, page_failed))
    duplicates = sum(s.duplicates for s in streamed)
    deltas = [s.deltas for s in streamed]
    print(
        f"SSE: {duplicates} duplicates; streamed text {min(deltas)} to {max(deltas)} "
        "messages per client"
    )
    missed = [
        f"run {s.run_id} seq {seq} ({kinds[(run, seq)]})"
        for s in streamed
        for run, seq in sorted(created)
        if run == s.run_id and seq not in s.arrivals
    ]
    if missed:
        print(f"  SSE missed: {', '.join(missed[:10])}", file=sys.stderr)
    for seen in [*streamed, *watched]:
        if seen.error:
            print(f"  error: {seen.error}", file=sys.stderr)


if __name__ == "__main__":
    main()
