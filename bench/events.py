"""How fast a run's events reach the pages watching it, through the real stack.

    .venv/bin/python bench/events.py [--clients 100] [--runs 10] [--redis redis://127.0.0.1:6379/0]

Starts daphne and one `manage.py worker` (as `make run` does) on the development database, queues
`--runs` demo runs for as many bench users, connects `--clients` websockets (spread evenly over
the runs, logged in as their owners) and watches them all, then starts the worker. For every event
each client receives it notes the arrival time; latency is arrival minus the event's `created_at`,
stamped just before its INSERT. Events lost counts, per client, the events of its run it never
got (it must be 0); messages of streamed text (which carry no event) are counted apart.
Without --redis events cross by PostgreSQL NOTIFY.
Floor: p99 under 100 ms at 100 clients; 0 lost.
"""

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

import websockets  # noqa: E402
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402

from agent.models import AgentRun, RunEvent  # noqa: E402
from agent.runs import submit_first_run  # noqa: E402

PROJECT_DIR = Path(__file__).resolve().parent.parent
TASK = "Compute the sum of 1..100 and save it to a file"
SEQ_MARKER = re.compile(r'id="run-\d+-seq" data-run="\d+" data-seq="(\d+)"( data-watch)?')
USER_PREFIX = "bench-events-"
WAIT = 300.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def session_for(user: User) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def queue_runs(count: int) -> list[tuple[int, str]]:
    """One queued demo run per bench user, with a session cookie for its owner."""
    User.objects.filter(username__startswith=USER_PREFIX).delete()
    runs = []
    for n in range(count):
        user = User.objects.create_user(f"{USER_PREFIX}{n}")
        runs.append((submit_first_run(user, TASK, model="mock").pk, session_for(user)))
    return runs


async def watch(url: str, origin: str, run_id: int, session: str, ready: asyncio.Event,
                arrivals: list[tuple[int, int, float]], streamed: list[float]) -> None:  # fmt: skip
    headers = {"Cookie": f"sessionid={session}", "Origin": origin}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        await ws.send(f'{{"watch": {run_id}, "after": 0}}')
        ready.set()
        last = 0
        while True:
            message = await ws.recv()
            arrived = time.time()
            markers = SEQ_MARKER.findall(message)
            if not markers:  # a streamed piece of a reply: it carries no event, so no seq
                streamed.append(arrived)
                continue
            seq, watching = markers[-1]
            arrivals.extend((run_id, s, arrived) for s in range(last + 1, int(seq) + 1))
            last = int(seq)
            if not watching:
                return


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


Arrivals = list[list[tuple[int, int, float]]]
Streamed = list[list[float]]  # per client, when each message of streamed text arrived


async def bench(
    clients: int, runs: list[tuple[int, str]], port: int, env: dict[str, str]
) -> tuple[Arrivals, Streamed]:
    url, origin = f"ws://127.0.0.1:{port}/ws/runs/", f"http://127.0.0.1:{port}"
    arrivals: Arrivals = [[] for _ in range(clients)]
    streamed: Streamed = [[] for _ in range(clients)]
    readies = [asyncio.Event() for _ in range(clients)]
    tasks = [
        asyncio.create_task(
            watch(url, origin, *runs[n % len(runs)], readies[n], arrivals[n], streamed[n])
        )
        for n in range(clients)
    ]
    await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in readies)), WAIT)
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "worker"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    finally:
        worker.terminate()
        worker.wait(60)
    return arrivals, streamed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--redis", default="", help="a Redis URL: carry events through Redis")
    options = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DEBUG")}
    if options.redis:
        env["REDIS_URL"] = options.redis
    port = free_port()
    server = subprocess.Popen(  # noqa: S603 (our own command line)
        [sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
         "loopsite.asgi:application"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            if time.monotonic() > deadline:
                raise SystemExit("daphne did not start")
            time.sleep(0.1)
        runs = queue_runs(options.runs)
        arrivals, streamed = asyncio.run(bench(options.clients, runs, port, env))
    finally:
        server.terminate()
        server.wait(60)
    run_ids = [run_id for run_id, _ in runs]
    stored = {
        (run_id, seq): created.timestamp()
        for run_id, seq, created in RunEvent.objects.filter(run_id__in=run_ids).values_list(
            "run_id", "seq", "created_at"
        )
    }
    per_run = {run_id: sum(1 for r, _ in stored if r == run_id) for run_id in run_ids}
    latencies = [
        (arrived - stored[(run_id, seq)]) * 1000
        for received in arrivals
        for run_id, seq, arrived in received
    ]
    lost = sum(
        per_run[runs[n % len(runs)][0]] - len(received) for n, received in enumerate(arrivals)
    )
    statuses = set(AgentRun.objects.filter(pk__in=run_ids).values_list("status", flat=True))
    User.objects.filter(username__startswith=USER_PREFIX).delete()
    bus = "Redis" if options.redis else "PostgreSQL NOTIFY"
    print(
        f"{options.clients} clients watching {len(runs)} runs ({', '.join(sorted(statuses))}) "
        f"by {bus}: {len(latencies)} events delivered, {lost} lost"
    )
    print(
        f"persist -> arrival: p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms"
    )
    pieces = [len(received) for received in streamed]
    print(f"streamed text: {min(pieces)} to {max(pieces)} messages per client")


if __name__ == "__main__":
    main()
