"""What the API costs the web process a request, beside the chat's page for the same thing.

    .venv/bin/python bench/api.py [--requests 300]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis as the
channel layer; no worker, so every run started stays queued and nothing else runs), logs one
person in, makes them an API key with `manage.py apikey create`, then measures daphne's own CPU
(its /proc times) over `--requests` requests each, after ten to warm up:
- starting a run: the chat's send form (POST /send/, a new conversation, answered by a redirect)
  beside the API's POST /api/v1/runs (a new conversation, answered by the run as JSON);
- reading a run: the chat's run fragment (GET /runs/ID/, the turn's HTML as htmx swaps it in)
  beside the API's GET /api/v1/runs/ID (the run as JSON).
Each figure is daphne's CPU over the series divided by its count. No floor: the API's share of
a request's CPU, printed beside the chat's (docs/api.md).
"""

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import MAIN_PROJECT, Person, Stack, log_in_all, running_stack
from bench.web import per_request

TASK = "What is 17 * 23?"
UNBOUNDED = "1000000"


def key_for(stack: Stack, username: str) -> str:
    """A key of the person's, as an operator makes one (its secret is the last line)."""
    printed = stack.manage("apikey", "create", username, "--name", "bench", "--scope", "read",
                           "--scope", "run")  # fmt: skip
    return printed.strip().splitlines()[-1]


async def chat_start(person: Person, token: str) -> None:
    sent = await person.client.post(
        "/send/", data={"csrfmiddlewaretoken": token, "task": TASK}, headers=person.headers
    )
    if sent.status_code != 302:
        raise RuntimeError(f"the chat's send answered {sent.status_code}")


async def api_start(person: Person, headers: dict[str, str]) -> int:
    started = await person.client.post("/api/v1/runs", json={"task": TASK}, headers=headers)
    if started.status_code != 201:
        raise RuntimeError(f"POST /api/v1/runs answered {started.status_code}: {started.text}")
    return int(started.json()["id"])


def checked(path: str, person: Person, headers: dict[str, str]) -> Callable[[], Awaitable[None]]:
    async def read() -> None:
        answer = await person.client.get(path, headers=headers)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path} answered {answer.status_code}")

    return read


async def measure(stack: Stack, requests: int) -> list[tuple[str, float, float]]:
    [person] = await log_in_all(stack, stack.create_people("api", 1))
    keyed = {"Authorization": f"Bearer {key_for(stack, person.username)}"}
    try:
        token = await person.open_home()
        chat_sends = await per_request(stack, lambda: chat_start(person, token), requests)
        api_starts = await per_request(stack, lambda: api_start(person, keyed), requests)
        run_id = await api_start(person, keyed)
        # The API's request carries no session cookie: a key is all it shows.
        bare = Person(stack, person.username)
        try:
            chat_read = await per_request(stack, checked(f"/runs/{run_id}/", person, {}), requests)
            api_read = await per_request(
                stack, checked(f"/api/v1/runs/{run_id}", bare, keyed), requests
            )
        finally:
            await bare.close()
    finally:
        await person.close()
    return [("start a run", chat_sends, api_starts), ("read a run", chat_read, api_read)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    options = parser.parse_args()
    with running_stack(
        options.project,
        "worker",
        latency_ms=0,
        LOOP_USER_ACTIVE_RUNS=UNBOUNDED,
        LOOP_API_KEY_REQUESTS_PER_MINUTE=UNBOUNDED,
        LOOP_API_PERSON_REQUESTS_PER_MINUTE=UNBOUNDED,
    ) as stack:
        figures = asyncio.run(measure(stack, options.requests))
    print(f"daphne's CPU a request, ms ({options.requests} requests each, after 10 to warm up):")
    print(f"  {'':<14}{'the chat':>10}{'the API':>10}{'API / chat':>12}")
    for what, chat, api in figures:
        print(f"  {what:<14}{chat:>10.2f}{api:>10.2f}{api / chat:>11.2f}x")


if __name__ == "__main__":
    main()
