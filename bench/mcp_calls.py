"""What an MCP tool costs beside Loop's own tools (issue 30): a call, a discovery, and a run
offered 100 MCP tools.

    .venv/bin/python bench/mcp_calls.py [--calls 200] [--tools 100] [--runs 50]

On a test database of its own (created and dropped), with the MCP test servers of the tests
(tests/mcp_servers: the SDK's own server, in the stateless 2026-07-28 revision and in the
session-based one before it) and a server of --tools search-like tools (bench/_many_tools.py),
each a process of its own on 127.0.0.1.

(a) A call: `add(2, 40)` in --calls rounds (after a warm-up), each round taking every way of
    calling in turn, p50 and p99 in ms. A built-in Loop tool doing the addition, through
    ToolRegistry.dispatch (its backstop thread, as every built-in tool runs); the MCP test
    server's `add` through mcp_servers.client.call_tool, a fresh connection per call as Loop
    makes them; and the same through the Loop tool a run gets (registry_for(person).dispatch:
    the pinned schema checked, the server's row read, the endpoint made, the answer rendered as
    delimited untrusted text). And a call to the --tools server (Loop skips the SDK's listing
    after a call, so a server of many tools costs no more to call).
(b) A discovery: mcp_servers.client.list_tools of each server, --calls times, p50 and p99; and
    discover() of the --tools server (the listing and its pinning checked against the database).
(c) A run offered --tools MCP tools (their site server open to everyone) beside one offered none:
    the bytes of the tools' specs a model request carries (registry_for(person).specs() as JSON),
    registry_for's time (each run makes its registry), and a mock-model run's one turn (a task
    the mock answers in one reply, every tool offered), --runs times, p50 and p99.
No floor: the figures are for docs/mcp.md.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import AbstractBaseUser  # noqa: E402
from django.db import connection  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from agent.llm.mock import MockLLM  # noqa: E402
from agent.toolset import registry_for  # noqa: E402
from bench._many_tools import MCP_PATH as MANY_PATH  # noqa: E402
from core.events import Event, RunStatus  # noqa: E402
from core.loop import run_agent  # noqa: E402
from core.results import ToolResult, ToolStatus  # noqa: E402
from mcp_servers import client  # noqa: E402
from mcp_servers.discovery import discover  # noqa: E402
from mcp_servers.models import McpServer  # noqa: E402
from netguard.ssrf import ANYWHERE  # noqa: E402
from tests.mcp_servers.harness import serve  # noqa: E402
from tools.base import Tool, ToolContext, ToolRegistry  # noqa: E402

ADD_ARGUMENTS = {"a": 2, "b": 40}
# A task the mock model answers in one reply (what it can do): one turn, every tool offered.
ONE_TURN_TASK = "Say hello."
WARM_UP = 5


class AddArguments(BaseModel):
    a: int
    b: int


ADD = Tool("add", "Adds two integers.", AddArguments, lambda args, context: str(args.a + args.b))


def p50_p99(seconds: list[float]) -> tuple[float, float]:
    """The median and the 99th percentile, in ms."""
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return statistics.median(seconds) * 1000, cuts[98] * 1000


def timed(work: Callable[[], object], times: int) -> list[float]:
    for _ in range(WARM_UP):
        work()
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        taken.append(time.perf_counter() - started)
    return taken


def row(what: str, seconds: list[float]) -> tuple[float, float]:
    p50, p99 = p50_p99(seconds)
    print(f"  {what:<58}{p50:>9.2f}{p99:>9.2f}")
    return p50, p99


def heading(title: str) -> None:
    print(f"\n{title}\n  {'':<58}{'p50 ms':>9}{'p99 ms':>9}")


def endpoint(url: str, name: str, revision: str = "") -> client.Endpoint:
    """As Loop reaches a site server: a listing probes for the revision, a call speaks the one
    the last listing found."""
    return client.Endpoint(label=name, url=url, allowed=ANYWHERE, seconds=30.0, revision=revision)


def site_server(name: str, url: str) -> McpServer:
    """A site server open to everyone, its tools discovered and pinned, as an operator adds it."""
    server: McpServer = McpServer.objects.create(name=name, prefix=name, url=url, everyone=True)
    discover(server)
    return server


def checked(result: ToolResult, expected: str) -> None:
    if result.status is not ToolStatus.OK or expected not in result.text:
        raise SystemExit(f"unexpected result: {result.status} {result.text[:300]}")


def calls(
    revisions: dict[str, str],
    many_url: str,
    person: AbstractBaseUser,
    context: ToolContext,
    n: int,
) -> None:
    """Rounds take each way of calling in turn, so a busy neighbour weighs on all alike."""
    heading(f"(a) one call of add(2, 40), {n} rounds")
    arguments = json.dumps(ADD_ARGUMENTS)
    builtin = ToolRegistry([ADD])
    registry = registry_for(person)
    ways: dict[str, Callable[[], object]] = {
        "built-in Loop tool (ToolRegistry.dispatch)": partial(
            builtin.dispatch, "add", arguments, context
        ),
    }
    versions = {}
    for revision, url in revisions.items():
        version = versions[revision] = client.list_tools(endpoint(url, revision)).protocol_version
        reached = endpoint(url, revision, version)
        name = f"{revision}__add"
        checked(registry.dispatch(name, arguments, context), "42")
        ways[f"MCP {version}: client.call_tool"] = partial(
            client.call_tool, reached, "add", ADD_ARGUMENTS
        )
        ways[loop_way(version)] = partial(registry.dispatch, name, arguments, context)
    # The SDK lists a server's tools after each call on a fresh connection (to check the answer
    # against the tool's output schema): on a server of many tools, a call costs a listing.
    many = endpoint(many_url, "many", versions["modern"])
    ways[f"MCP {versions['modern']}: client.call_tool, a server of many tools"] = partial(
        client.call_tool, many, "search_000", {"query": "x"}
    )
    checked(builtin.dispatch("add", arguments, context), "42")
    taken = rounds(ways, n)
    base = statistics.median(taken["built-in Loop tool (ToolRegistry.dispatch)"]) * 1000
    loop = {}
    for way, seconds in taken.items():
        loop[way] = row(way, seconds)[0]
    over = "; ".join(
        f"{version} +{loop[loop_way(version)] - base:.1f} ms" for version in versions.values()
    )
    print(f"  an MCP call (Loop's tool) over a built-in one, p50: {over}")


def loop_way(version: str) -> str:
    return f"MCP {version}: Loop's tool (registry_for.dispatch)"


def rounds(ways: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    taken: dict[str, list[float]] = {way: [] for way in ways}
    for number in range(WARM_UP + n):
        for way, work in ways.items():
            started = time.perf_counter()
            work()
            if number >= WARM_UP:
                taken[way].append(time.perf_counter() - started)
    return taken


def discoveries(servers: dict[str, str], many: McpServer, n: int) -> None:
    heading(f"(b) discovering a server's tools, {n} times")
    for name, url in servers.items():
        reached = endpoint(url, name)
        listing = client.list_tools(reached)
        row(
            f"list_tools, {listing.protocol_version}, {len(listing.definitions)} tools",
            timed(partial(client.list_tools, reached), n),
        )
    row(
        f"discover() (listing + pinning), {many.tools.count()} tools",
        timed(lambda: discover(many), max(n // 4, 20)),
    )


def one_turn(tools: ToolRegistry, context: ToolContext) -> None:
    events: list[Event] = []

    def keep(event: Event) -> None:
        events.append(event)

    result = run_agent(ONE_TURN_TASK, llm=MockLLM(), tools=tools.bind(context), sink=keep)
    if result.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"the mock run ended {result.status}")


def spec_bytes(person: AbstractBaseUser) -> tuple[int, int]:
    specs = registry_for(person).specs()
    return len(json.dumps(specs, ensure_ascii=False).encode()), len(specs)


@dataclass
class Offered:
    """One side of (c): its tools' count and specs' size, and each round's times."""

    label: str
    tools: int = 0
    size: int = 0
    registry: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    run: list[float] = field(default_factory=list)

    def round(self, person: AbstractBaseUser, context: ToolContext) -> None:
        """A run as the engine makes one: its registry, then its turn, timed apart and whole."""
        started = time.perf_counter()
        tools = registry_for(person)
        made = time.perf_counter()
        one_turn(tools, context)
        ended = time.perf_counter()
        self.registry.append(made - started)
        self.turn.append(ended - made)
        self.run.append(ended - started)

    def shown(self) -> str:
        times = "".join(
            "{:>12.2f}{:>9.2f}".format(*p50_p99(taken))
            for taken in (self.registry, self.turn, self.run)
        )
        return f"  {self.label:<16}{self.tools:>6}{self.size:>10,}{times}"


def many_offered(
    person: AbstractBaseUser, context: ToolContext, many: McpServer, runs: int
) -> None:
    """Rounds alternate between the two sides, so a busy neighbour weighs on both alike."""
    count = many.tools.count()
    print(f"\n(c) a run offered {count} MCP tools beside one offered none, {runs} rounds")
    McpServer.objects.exclude(pk=many.pk).update(enabled=False)
    sides = {False: Offered("built-ins only"), True: Offered(f"+{count} MCP tools")}
    for number in range(WARM_UP + runs):
        for offered, side in sides.items():
            McpServer.objects.filter(pk=many.pk).update(enabled=offered)
            if number == 0:
                side.size, side.tools = spec_bytes(person)
            side.round(person, context)
            if number < WARM_UP:
                side.registry, side.turn, side.run = [], [], []
    print(
        f"  {'':<16}{'tools':>6}{'specs B':>10}{'registry_for p50/p99':>21}"
        f"{'1 turn p50/p99':>21}{'run p50/p99 ms':>21}"
    )
    for side in sides.values():
        print(side.shown())
    bare, full = sides[False], sides[True]
    print(
        f"  {count} MCP tools: a model request's tool specs {full.size / bare.size:.1f}x "
        f"({(full.size - bare.size) / count:.0f} bytes a tool); registry_for "
        f"{statistics.median(full.registry) / statistics.median(bare.registry):.1f}x, "
        f"the turn {statistics.median(full.turn) / statistics.median(bare.turn):.1f}x, "
        f"the run {statistics.median(full.run) / statistics.median(bare.run):.1f}x (p50)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--runs", type=int, default=50)
    options = parser.parse_args()
    connection.settings_dict["TEST"]["NAME"] = "loop_bench_mcp"
    original = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        person = get_user_model().objects.create_user("bench-mcp")
        with (
            tempfile.TemporaryDirectory(prefix="bench-mcp-") as workspace,
            serve("--revision", "modern") as modern,
            serve("--revision", "legacy") as legacy,
            serve("--tools", str(options.tools), module="bench._many_tools") as many_served,
        ):
            context = ToolContext(person.pk, person.get_username(), Path(workspace))
            revisions = {"modern": modern.url, "legacy": legacy.url}
            for name, url in revisions.items():
                site_server(name, url)
            many_url = many_served.base_url + MANY_PATH  # the harness adds the path to its app's
            many = site_server("many", many_url)
            calls(revisions, many_url, person, context, options.calls)
            discoveries({**revisions, "many": many_url}, many, options.calls)
            many_offered(person, context, many, options.runs)
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)


if __name__ == "__main__":
    main()
