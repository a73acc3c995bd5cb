"""What the web process (daphne) spends a page and a socket message, in CPU.

    .venv/bin/python bench/web.py [--requests 300] [--messages 600] [--project OLD]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis as the
channel layer; no worker, so the run sent stays queued and nothing else runs), logs one person in
and sends one task, then measures daphne's own CPU (its /proc times) over:
- `--requests` requests of the home page, then of the conversation page, one after the other;
- the page's socket, watching that run, woken `--messages` times through Redis as a worker wakes
  it, in two ways: a wake-up that says only "event S is stored", which the socket answers by
  reading the log (here it finds nothing new, so nothing is drawn or sent), and a wake-up that
  carries the next event (a tool call's start), which a socket that has every event before it
  draws and sends without reading the log (the code before it read the log for both).
Each figure is daphne's CPU over the whole series divided by its count, after ten to warm up.
`--project OLD` measures another checkout's code (say the code before) with this bench's client.
No floor: it says where the web's share of a run's CPU goes (docs/engine.md).
"""

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import websockets
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import (
    MAIN_PROJECT,
    REDIS_URL,
    SEQ_MARKER,
    Person,
    Stack,
    log_in_all,
    running_stack,
)
from bench.load import own_cpu_seconds

WARM_UP = 10


def tool_call_started(step: int) -> list[Any]:
    """A tool call's start, as the event log stores it (kind and data)."""
    data = {"step": step, "call_id": f"c{step}", "tool": "run_code", "arguments": '{"code": "1"}'}
    return ["tool_call_started", data]


async def per_request(stack: Stack, ask: Callable[[], Awaitable[object]], count: int) -> float:
    """daphne's CPU per request, in ms."""
    assert stack.web is not None
    for _ in range(WARM_UP):
        await ask()
    before = own_cpu_seconds(stack.web.pid)
    for _ in range(count):
        await ask()
    return (own_cpu_seconds(stack.web.pid) - before) * 1000 / count


async def a_run_sent(person: Person) -> tuple[str, int]:
    """The conversation page of a task the person sends, and its run."""
    token = await person.open_home()
    sent = await person.client.post(
        "/send/",
        data={"csrfmiddlewaretoken": token, "task": "What is 17 * 23?"},
        headers=person.headers,
    )
    page = await person.client.get(sent.headers["location"])
    return sent.headers["location"], int(SEQ_MARKER.findall(page.text)[-1][0])


async def socket_costs(
    stack: Stack, person: Person, run_id: int, count: int
) -> tuple[float, float]:
    """daphne's CPU per wake-up of a watching socket, in ms: one answered by a read of the log,
    and one carrying its event."""
    assert stack.web is not None
    prefix = stack.env["LOOP_CHANNEL_PREFIX"]
    layer = layer_of(stack, prefix)
    group = f"{prefix}.run-{run_id}"
    cookie = "; ".join(f"{name}={value}" for name, value in person.client.cookies.items())
    url = f"ws://127.0.0.1:{stack.port}/ws/runs/"
    async with websockets.connect(
        url, origin=stack.url, additional_headers={"Cookie": cookie}
    ) as socket_:
        await socket_.send(json.dumps({"watch": run_id, "after": 0}))
        await socket_.recv()
        await asyncio.sleep(1)  # the socket's own start is over

        async def wake(seq: int) -> None:
            await layer.group_send(group, {"type": "run.event", "run": run_id, "seq": seq})
            await asyncio.sleep(0.005)  # one at a time, as a run's events come

        async def carry(seq: int) -> None:
            message = {"type": "run.event", "run": run_id, "seq": seq}
            await layer.group_send(group, {**message, "events": [[seq, *tool_call_started(seq)]]})
            await asyncio.sleep(0.005)

        reader = asyncio.create_task(drain(socket_))  # what the socket sends, read as it comes
        read = await per_message(stack, wake, count, first=10_000)
        carried = await per_message(stack, carry, count, first=1)
        reader.cancel()
    return read, carried


async def drain(socket_: Any) -> None:
    async for _ in socket_:
        pass


def layer_of(stack: Stack, prefix: str) -> Any:
    """A channel layer of the kind the site's settings choose (a worker's wake-ups must reach
    its sockets): Redis pub/sub, or the older lists of channels_redis.core."""
    settings = (stack.project / "loopsite" / "settings.py").read_text()
    if "PubSubChannelLayer" in settings:
        return RedisPubSubChannelLayer(hosts=[REDIS_URL], prefix=prefix)
    return RedisChannelLayer(hosts=[REDIS_URL], prefix=prefix)


async def per_message(
    stack: Stack, send: Callable[[int], Awaitable[None]], count: int, *, first: int
) -> float:
    assert stack.web is not None
    for seq in range(first, first + WARM_UP):
        await send(seq)
    await asyncio.sleep(0.5)
    before = own_cpu_seconds(stack.web.pid)
    for seq in range(first + WARM_UP, first + WARM_UP + count):
        await send(seq)
    await asyncio.sleep(0.5)  # what the last ones woke is done
    return (own_cpu_seconds(stack.web.pid) - before) * 1000 / count


async def measure(stack: Stack, requests: int, messages: int) -> None:
    person = (await log_in_all(stack, stack.create_people("web", 1)))[0]
    try:
        conversation, run_id = await a_run_sent(person)
        home = await per_request(stack, lambda: person.client.get("/"), requests)
        page = await per_request(stack, lambda: person.client.get(conversation), requests)
        read, carried = await socket_costs(stack, person, run_id, messages)
    finally:
        await person.close()
    print(f"  the home page: {home:.2f} ms of daphne's CPU a request")
    print(f"  a conversation page (one turn): {page:.2f} ms a request")
    print(f"  a socket's wake-up answered by a read of the log: {read:.2f} ms a message")
    print(f"  a socket's wake-up carrying its event, drawn and sent: {carried:.2f} ms a message")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    options = parser.parse_args()
    with running_stack(options.project, "worker", latency_ms=0) as stack:
        print(f"daphne in {stack.project}:")
        asyncio.run(measure(stack, options.requests, options.messages))


if __name__ == "__main__":
    main()
