"""How long a person waits for the first card of a run: the first run after a worker starts, and
runs sent one at a time to the same idle worker afterwards.

    .venv/bin/python bench/first_card.py [--runs 5] [--latency-ms 0]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, the mock model),
gives each bench person one memory (so a run recalls, as most people's runs do: recall needs the
embedder), starts one worker (`manage.py worker --concurrency 1`) and, once its log says it works
runs, sends the demo task through the send form; then sends it again for each next person, one at
a time, each after the last run ended. For each run it prints, from the send form's post:
- first card: the run's first event that draws a card in the chat (memories recalled, a reply
  with text, a tool call, an end), as the database stamped it;
- what the page said meanwhile: "Waiting for a worker" while the run was queued (created ->
  started_at), "Working" after.
The goal (issue 28): the first card within 0.5 s of Send on an idle worker, the first run after a
worker start included, or the page saying what it waits for.
"""

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import MAIN_PROJECT, Stack, Watched, log_in_all, running_stack

# The events the chat draws a card for (chat/rendering.py's event_card); run_started and
# run_resumed are the person's own bubble and a marker.
CARD_KINDS = ("memories_recalled", "tool_call_started", "run_finished")
READY_LINE = b"working up to"
GOAL_SECONDS = 0.5


def give_memories(stack: Stack, usernames: list[str]) -> None:
    """One memory each, stored as the person's own (recall then has something to embed for)."""
    script = (
        "from django.contrib.auth.models import User\n"
        "from memory.store import remember\n"
        f"for user in User.objects.filter(username__in={usernames!r}):\n"
        "    remember(user, 'My favourite city is Lisbon', origin='person')\n"
    )
    stack.manage("shell", "-c", script)


def wait_until_working(stack: Stack, started: float) -> float:
    """Seconds from the worker's start until its log says it works runs."""
    log = stack.var_dir / "worker-0.log"
    while READY_LINE not in log.read_bytes():
        if stack.workers[0].poll() is not None or time.monotonic() - started > 120:
            raise SystemExit(f"the worker did not start; see {log}")
        time.sleep(0.02)
    return time.monotonic() - started


def first_card(stack: Stack, seen: Watched) -> tuple[float, float]:
    """Seconds from the send to the run's first card, and to its pickup by the worker."""
    (first, started), *_ = stack.query(
        "SELECT (SELECT extract(epoch FROM min(e.created_at)) FROM agent_runevent e"
        "        WHERE e.run_id = r.id AND e.kind = ANY(%s)"
        "           OR (e.run_id = r.id AND e.kind = 'model_replied' AND e.data->>'text' <> '')),"
        "       extract(epoch FROM r.started_at) FROM agent_agentrun r WHERE r.id = %s",
        (list(CARD_KINDS), seen.run_id),
    )
    return float(first) - seen.sent_at, float(started) - seen.sent_at


async def send_one(stack: Stack, username: str) -> Watched:
    (person,) = await log_in_all(stack, [username])
    try:
        token = await person.open_home()
        seen = Watched(username)
        await asyncio.wait_for(person.send_and_watch(token, seen), 120)
        return seen
    finally:
        await person.close()


def line(what: str, card: float, pickup: float) -> str:
    verdict = "ok" if card <= GOAL_SECONDS else f"over {GOAL_SECONDS:g} s"
    return (
        f"  {what}: first card {card * 1000:.0f} ms after Send ({verdict}); "
        f"'Waiting for a worker' {max(pickup, 0) * 1000:.0f} ms of it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs after the first, one at a time")
    parser.add_argument("--latency-ms", type=int, default=0, help="the mock's time per turn")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    options = parser.parse_args()
    with running_stack(options.project, "worker", latency_ms=options.latency_ms) as stack:
        names = stack.create_people("bench-first-", options.runs + 1)
        give_memories(stack, names)
        began = time.monotonic()
        stack.start_worker(1)
        ready = wait_until_working(stack, began)
        print(
            f"worker started and working runs {ready:.2f} s after its process began "
            f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
            flush=True,
        )
        cards = []
        for number, name in enumerate(names):
            seen = asyncio.run(send_one(stack, name))
            if seen.error or not seen.run_id:
                raise SystemExit(f"the run of {name} failed: {seen.error}")
            card, pickup = first_card(stack, seen)
            what = "first run after the worker started" if number == 0 else f"idle run {number}"
            print(line(what, card, pickup), flush=True)
            cards.append(card)
        later = cards[1:]
        if later:
            print(
                f"first run {cards[0] * 1000:.0f} ms; the {len(later)} runs after it: p50 "
                f"{statistics.median(later) * 1000:.0f} ms, max {max(later) * 1000:.0f} ms"
            )


if __name__ == "__main__":
    main()
