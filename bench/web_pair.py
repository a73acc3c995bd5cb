"""What the web process (daphne) spends a page and a socket message, in CPU, in two trees side by
side: each request or message goes to one daphne then the other, so a machine shared with other
work slows both alike (bench/web.py measures one tree, one series after the other).

    .venv/bin/python bench/web_pair.py OLD [--count 200] [--parts home,conv,send,...]

Starts two fresh sites (bench/_stack.py: daphne, an embedded PostgreSQL of its own each, Redis as
the channel layer; no worker, so the runs sent stay queued), this tree's and OLD's, logs one person
in on each, sends one task, then for each part measures each daphne's own CPU (its /proc times)
over `--count` rounds, after five to warm up:
- home, conv: the home page; the conversation page (one turn);
- send: the send form's POST of a new conversation's first task (answered with a redirect);
- connect: the page's socket opened and closed, watching nothing;
- socket: the page's socket opened, asked to watch the run (its first read of the log and the
  seq marker it answers with), and closed;
- carry, read: a watching socket's wake-up that carries its event (drawn and sent without a
  read), and one answered by a read of the log (here it finds nothing new).
Each figure is daphne's CPU over its rounds divided by their count. No floor: it says where the
web's share of a run's CPU goes (docs/engine.md, "Where a run's CPU goes").
"""

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import MAIN_PROJECT, Person, Stack, log_in_all, running_stack
from bench.load import own_cpu_seconds
from bench.web import a_run_sent, drain, layer_of, tool_call_started

WARM_UP = 5
PARTS = ("home", "conv", "send", "connect", "socket", "carry", "read")


@dataclass
class Site:
    """One tree's running site, its person and the run they sent."""

    stack: Stack
    person: Person
    conversation: str
    run_id: int
    token: str
    used: dict[str, float] = field(default_factory=dict)  # part -> daphne's CPU seconds
    layer: Any = None  # the channel layer a worker would wake the site's sockets through

    @property
    def web_pid(self) -> int:
        assert self.stack.web is not None
        return self.stack.web.pid

    def socket(self) -> Any:
        cookie = "; ".join(f"{k}={v}" for k, v in self.person.client.cookies.items())
        url = f"ws://127.0.0.1:{self.stack.port}/ws/runs/"
        return websockets.connect(url, origin=self.stack.url, additional_headers={"Cookie": cookie})


async def site_of(stack: Stack) -> Site:
    person = (await log_in_all(stack, stack.create_people("pair", 1)))[0]
    conversation, run_id = await a_run_sent(person)
    token = await person.open_home()
    return Site(stack, person, conversation, run_id, token)


async def send(site: Site) -> None:
    data = {"csrfmiddlewaretoken": site.token, "task": "What is 17 * 23?"}
    answer = await site.person.client.post("/send/", data=data, headers=site.person.headers)
    if answer.status_code != 302:
        raise SystemExit(f"the send answered {answer.status_code}")


async def connect(site: Site) -> None:
    async with site.socket():
        pass


async def watched_socket(site: Site) -> None:
    async with site.socket() as socket_:
        await socket_.send(json.dumps({"watch": site.run_id, "after": 0}))
        await socket_.recv()


REQUESTS: dict[str, Callable[[Site], Awaitable[object]]] = {
    "home": lambda site: site.person.client.get("/"),
    "conv": lambda site: site.person.client.get(site.conversation),
    "send": send,
    "connect": connect,
    "socket": watched_socket,
}


async def measured(site: Site, part: str, action: Awaitable[object], settle: float) -> None:
    before = own_cpu_seconds(site.web_pid)
    await action
    await asyncio.sleep(settle)  # what it woke in daphne is done
    site.used[part] = site.used.get(part, 0.0) + own_cpu_seconds(site.web_pid) - before


async def requests(sites: list[Site], part: str, count: int) -> None:
    for site in sites:
        for _ in range(WARM_UP):
            await REQUESTS[part](site)
    for _ in range(count):
        for site in sites:
            await measured(site, part, REQUESTS[part](site), 0.002)


async def wake_ups(sites: list[Site], part: str, count: int) -> None:
    """A watching socket on each site, woken through Redis as a worker wakes it."""
    first = 10_000 if part == "read" else 1  # read: past the log's end, nothing new is found
    async with contextlib.AsyncExitStack() as stack:
        readers = []
        for site in sites:
            socket_ = await stack.enter_async_context(site.socket())
            await socket_.send(json.dumps({"watch": site.run_id, "after": 0}))
            await socket_.recv()
            readers.append(asyncio.create_task(drain(socket_)))
        await asyncio.sleep(1)
        for seq in range(first, first + WARM_UP + count):
            for site in sites:
                woken = wake(site, seq, carry=part == "carry")
                if seq < first + WARM_UP:
                    await woken
                else:
                    await measured(site, part, woken, 0.01)
        for reader in readers:
            reader.cancel()


async def wake(site: Site, seq: int, *, carry: bool) -> None:
    prefix = site.stack.env["LOOP_CHANNEL_PREFIX"]
    if site.layer is None:
        site.layer = layer_of(site.stack, prefix)
    message: dict[str, Any] = {"type": "run.event", "run": site.run_id, "seq": seq}
    if carry:
        message["events"] = [[seq, *tool_call_started(seq)]]
    await site.layer.group_send(f"{prefix}.run-{site.run_id}", message)


async def measure(stacks: list[Stack], parts: list[str], count: int) -> None:
    sites = [await site_of(stack) for stack in stacks]
    try:
        for part in parts:
            if part in REQUESTS:
                await requests(sites, part, count)
            else:
                await wake_ups(sites, part, count)
            each = ", ".join(
                f"{site.stack.project.name} {site.used[part] * 1000 / count:.2f} ms"
                for site in sites
            )
            print(f"  {part}: {each}", flush=True)
    finally:
        for site in sites:
            await site.person.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="the other tree (say the code before)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated")
    options = parser.parse_args()
    parts = options.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"no such part: {', '.join(sorted(unknown))}")
    settings = {"LOOP_USER_ACTIVE_RUNS": "1000000"}  # the sends' runs stay queued
    with (
        running_stack(MAIN_PROJECT, "worker", latency_ms=0, **settings) as ours,
        running_stack(options.old, "worker", latency_ms=0, **settings) as theirs,
    ):
        print(f"daphne's CPU, {MAIN_PROJECT} beside {theirs.project}:")
        asyncio.run(measure([ours, theirs], parts, options.count))


if __name__ == "__main__":
    main()
