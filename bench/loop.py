"""Loop's own overhead per step (an instant model, a no-op tool), and the model clients' per turn.

    .venv/bin/python bench/loop.py [--repeats 5] [--turns 150] [--only loop|clients]
    .venv/bin/python bench/loop.py --project OLD [--repeats 5]   # the loop beside OLD's
    .venv/bin/python bench/loop.py --observers [--steps 50] [--repeats 5]   # metrics, traces

The loop, with nothing else to wait for: each step is one model turn asking for one tool call
and that call's result. Two sinks: (a) events kept in memory; (b) every event persisted to
PostgreSQL by the recorder real runs use (a run's stop is read by its watcher, a thread of its
own, so no step pays for it).
Recalling memories before the first step and remembering the outcome after the last are per run,
not per step, and are left out (bench/memory.py times recall). Runs of 20 and 200 steps show
whether a step's cost grows with the history; persisting appends, so it should not. A third line
runs the in-memory case with the tool in the backstop thread every real tool runs in
(tools.base.Tool.own_deadline), to show what that thread costs, and a fourth with the run's
Interrupt, every worked run has, which asks each model turn in a thread a stop can abandon.
Floors: (a) under 100 µs per step; (b) at most 3x one INSERT of an event-sized row committed on
its own, measured in the same run, rounds alternating (a step is a model turn and a tool call: its
reply and its call's start go in one statement, the call's end and its audit row in another, two
commits in all); and 200 steps within 1.3x of 20 per step.

With `--project OLD`, the loop's figures (not the clients') of this tree beside OLD's, OLD being
another checkout of Loop (the code before a change) whose bench/loop.py takes `--figures` as this
one does: each tree's own bench in a process of its own, both on this process's database, rounds
alternating (and which goes first), medians side by side with this tree's over OLD's.

With `--observers`, the persisted step with metrics and traces off (a site with neither: no
observer hears a run) and on (both as a site's process runs them: counters in prometheus-client's
multiprocess files, spans exported in batches to a local OTLP/HTTP sink by the SDK's thread),
rounds alternating which goes first: wall time, this thread's CPU and the process's CPU (the
export's thread too) a step, on over off, and the observers' own time timed around each call.
Floor (issue 43, on throughput): under 5%; bench/load.py --observers gives the throughput.

The model clients (`--turns` turns each, after a warm-up; `--only clients` needs no database):
GroqLLM and OpenAICompatibleLLM (one client on plain httpx2, in two dialects) side by
side in this process, asking a fake chat-completions server on loopback (bench/_chat_server.py,
in a process of its own) for a turn of the demo task as a run asks for it: the system prompt, the
task, each earlier turn's call and result (turn 2 and turn 10, the last a default run has), the
default tools, the run's time left as the turn's timeout (so the watchdog runs). The reply is a
short answer and one tool call, whole or streamed (a token or so a chunk, to a deltas callback).
Beside each, the bare exchange: the same request body, already encoded, posted by a plain httpx2
client, and the reply's bytes read, nothing parsed. A client's own cost is its
turn minus the bare exchange of the same round; a round takes each of the eight and its bare
exchange in turn, in reverse order every other round, so a noisy neighbour weighs on all alike.
Median and p95 over the rounds, in µs; then what a streamed chunk and each earlier call in the
history add (from the medians). No floor: a model turn takes a second or more, beside which the
issue asks it to be well under a millisecond.
"""

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

import httpx2  # noqa: E402
import psycopg  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from psycopg._connection_base import BaseConnection  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from agent.llm.chat_completions import ChatCompletionsLLM  # noqa: E402
from agent.llm.groq import GroqLLM  # noqa: E402
from agent.llm.openai_compat import OpenAICompatibleLLM  # noqa: E402
from agent.models import AgentRun  # noqa: E402
from agent.observers import Observer, forget, observe  # noqa: E402
from agent.recorder import RunRecorder  # noqa: E402
from agent.runs import start_run  # noqa: E402
from agent.toolset import default_registry  # noqa: E402
from bench import _chat_server as chat_server  # noqa: E402
from bench._observers import in_this_process, otlp_sink  # noqa: E402
from core.events import Event, RunStatus  # noqa: E402
from core.interrupt import Interrupt  # noqa: E402
from core.llm import Message, Reply, ToolCall, ToolSpec  # noqa: E402
from core.loop import SYSTEM_PROMPT, Limits, run_agent  # noqa: E402
from tools.base import Tool, ToolContext, ToolRegistry  # noqa: E402


class NoopArguments(BaseModel):
    n: int


# It cannot hang, so it needs no backstop thread (tools.base.Tool.own_deadline).
NOOP = Tool("noop", "Does nothing.", NoopArguments, lambda args, context: "ok", own_deadline=True)


class InstantLLM:
    """Replies at once from a list built ahead: `steps` calls to noop, then an answer."""

    provider = "bench"
    model = "instant"

    def __init__(self, steps: int) -> None:
        self.replies = [
            Reply(tool_calls=(ToolCall(f"call_{n}", "noop", json.dumps({"n": n})),))
            for n in range(steps)
        ] + [Reply(text="done")]
        self.turn = 0

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        self.turn += 1
        return self.replies[self.turn - 1]


def limits(steps: int) -> Limits:
    return Limits(max_iterations=steps + 1, max_tool_calls=steps, max_identical_calls=steps + 1)


def tools(tool: Tool = NOOP) -> object:
    return ToolRegistry([tool]).bind(ToolContext(0, "bench", Path("/nonexistent")))


def in_memory_backstop(steps: int) -> float:
    """The same no-op tool run as every real tool is, in a backstop thread (not a floor)."""
    return in_memory(steps, dataclasses.replace(NOOP, own_deadline=False))


def in_memory_interruptible(steps: int) -> float:
    """The same with the run's Interrupt, as every worked run has: each model turn is then asked
    in a thread a stop can abandon (not a floor)."""
    return in_memory(steps, interrupt=Interrupt())


def in_memory(steps: int, tool: Tool = NOOP, interrupt: Interrupt | None = None) -> float:
    events: list[Event] = []
    llm = InstantLLM(steps)
    started = time.perf_counter()
    result = run_agent(
        "bench",
        llm=llm,
        tools=tools(tool),
        sink=events.append,
        limits=limits(steps),
        interrupt=interrupt,
    )
    elapsed = time.perf_counter() - started
    assert result.status is RunStatus.SUCCEEDED, result
    return elapsed / steps


def persisted(steps: int) -> float:
    return persisted_step(steps).wall


def persisted_step(steps: int) -> "Timing":
    """A persisted step, in wall-clock time and in this thread's CPU time (which leaves out the
    server's work and the disk's wait, and which neighbours inflate less)."""
    user, _ = get_user_model().objects.get_or_create(username="bench")
    run = start_run(user, "bench", model="mock", limits=limits(steps))
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)  # as execute_run claims it
    llm, bound, recorder = InstantLLM(steps), tools(), RunRecorder(run, batched=True)
    started = clock()
    result = run_agent("bench", llm=llm, tools=bound, sink=recorder, limits=limits(steps))
    elapsed = since(started)
    assert result.status is RunStatus.SUCCEEDED, result.error
    assert run.tool_executions.count() == steps
    return Timing(elapsed.wall / steps, elapsed.cpu / steps)


def one_insert(steps: int) -> float:
    """The floor a persisted step is held to: one INSERT of an event-sized row, committed on its
    own (autocommit), into a table like the event log, indexes and all; per INSERT."""
    data = json.dumps({"text": "ok", "tool_calls": [], "prompt_tokens": 1})
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (LIKE agent_runevent INCLUDING ALL)"
        )
        started = time.perf_counter()
        for seq in range(steps):
            cursor.execute(
                f"INSERT INTO {FLOOR_TABLE} (run_id, seq, kind, step, data, created_at) "  # noqa: S608
                "VALUES (%s, %s, 'model_replied', %s, %s::jsonb, now())",
                [0, seq, seq, data],
            )
        elapsed = time.perf_counter() - started
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")
    return elapsed / steps


FLOOR_TABLE = "bench_one_insert_floor"


def median_per_step(measure: Callable[[int], float], steps: int, repeats: int) -> float:
    measure(steps)  # warm up: imports, caches, connections
    return statistics.median(measure(steps) for _ in range(repeats))


def loop_overhead(repeats: int) -> None:
    """Each figure's rounds interleave the persisted run with the one-INSERT floor, so both meet
    the same disk and the same neighbours."""
    print(f"{'sink':<12}{'20 steps':>14}{'200 steps':>14}{'200/20':>9}  floor")
    try:
        figures = loop_figures(repeats)
        print_persisted(figures)
        for name, _ in SINKS:
            print_sink(name, figures[f"{name} 20"], figures[f"{name} 200"])
    finally:
        forget_bench()


# The in-memory sinks; only the first is held to a floor.
SINKS: tuple[tuple[str, Callable[[int], float]], ...] = (
    ("in memory", in_memory),
    ("+ backstop", in_memory_backstop),
    ("+ interrupt", in_memory_interruptible),
)
IN_MEMORY_FLOOR = 100e-6


def loop_figures(repeats: int) -> dict[str, float]:
    """Every figure of the loop's table, in seconds a step (keys as `print_loop` reads them)."""
    figures = persisted_rounds(repeats)
    for name, measure in SINKS:
        figures[f"{name} 20"] = median_per_step(measure, 20, repeats * 10)
        figures[f"{name} 200"] = median_per_step(measure, 200, repeats)
    return figures


def forget_bench() -> None:
    get_user_model().objects.filter(username="bench").delete()  # its runs and memories too
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")


def print_sink(name: str, short: float, long: float) -> None:
    ratio = long / short
    figures = f"{name:<12}{short * 1e6:>11.1f} µs{long * 1e6:>11.1f} µs{ratio:>8.2f}x  "
    if name != "in memory":
        print(figures + "(no floor: for comparison)")
        return
    ok = max(short, long) < IN_MEMORY_FLOOR and ratio <= 1.3
    verdict = "met" if ok else "MISSED"
    print(figures + f"< {IN_MEMORY_FLOOR * 1e6:g} µs/step, <= 1.3x: {verdict}")


def persisted_rounds(repeats: int) -> dict[str, float]:
    """The persisted step (20 and 200 steps a run) beside one INSERT, rounds alternating."""
    persisted(20)  # warm up: imports, caches, connections
    one_insert(20)
    steps: dict[int, list[float]] = {20: [], 200: []}
    cpu: list[float] = []
    floor: list[float] = []
    for _ in range(repeats):
        for size in (20, 200):
            step = persisted_step(size)
            steps[size].append(step.wall)
            cpu.append(step.cpu)
            floor.append(one_insert(size))
    return {
        "PostgreSQL 20": statistics.median(steps[20]),
        "PostgreSQL 200": statistics.median(steps[200]),
        "PostgreSQL CPU": statistics.median(cpu),
        "one INSERT": statistics.median(floor),
    }


def print_persisted(figures: dict[str, float]) -> None:
    short, long, one = figures["PostgreSQL 20"], figures["PostgreSQL 200"], figures["one INSERT"]
    ratio = long / short
    worst = max(short, long) / one
    verdict = "met" if worst <= 3 and ratio <= 1.3 else "MISSED"
    print(
        f"{'PostgreSQL':<12}{short * 1e6:>11.1f} µs{long * 1e6:>11.1f} µs{ratio:>8.2f}x  "
        f"<= 3x one INSERT ({one * 1e6:.1f} µs): {worst:.1f}x, <= 1.3x: {verdict}"
    )
    print(f"{'':<12}this thread's CPU a step: {figures['PostgreSQL CPU'] * 1e6:.1f} µs")
    print(f"{'':<12}a step's round trips: {round_trips(200)}")


# --- metrics and traces off and on (`--observers`) -----------------------------------------------


class Timed:
    """An observer of runs' events, with the time spent in it added up."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.seconds = 0.0

    def __call__(self, run: AgentRun, events: Sequence[Event]) -> None:
        started = time.perf_counter()
        self.observer(run, events)
        self.seconds += time.perf_counter() - started


def observers_compared(steps: int, repeats: int) -> None:
    """The persisted step with metrics and traces off (a site with no LOOP_METRICS_TOKEN and no
    OTLP endpoint: nobody observes runs) and on (both observers, counting in prometheus-client's
    files, spans exported in batches to a local OTLP sink by the SDK's thread), rounds
    alternating which goes first. Wall and this thread's CPU a step; the process's CPU a step,
    which has the export's thread too; and the observers' own time, timed around each call."""
    with (
        tempfile.TemporaryDirectory(prefix="loop-bench-metrics-") as directory,
        otlp_sink() as sink,
    ):
        timed = [Timed(observer) for observer in in_this_process(Path(directory), sink)]
        for each in timed:
            forget(each.observer)
        try:
            figures = observed_rounds(timed, steps, repeats)
        finally:
            for each in timed:
                forget(each)
            forget_bench()
    print(
        f"A persisted step, metrics and traces off and on ({steps} steps a run, {repeats} rounds)"
    )
    print(f"{'':<24}{'off':>10}{'on':>10}{'on/off':>9}")
    for name in ("wall", "thread CPU", "process CPU"):
        off, on = figures[f"{name} off"], figures[f"{name} on"]
        print(f"{name + ' a step':<24}{off * 1e6:>7.0f} µs{on * 1e6:>7.0f} µs{on / off:>8.3f}x")
    own, off = figures["observers"], figures["wall off"]
    print(
        f"{'the observers a step':<24}{'':>10}{own * 1e6:>7.0f} µs  ({own / off:.1%} of a step off)"
    )


def observed_rounds(timed: list[Timed], steps: int, repeats: int) -> dict[str, float]:
    for on in (True, False):  # warm up both: imports, files, the exporter's connection
        observed_step(timed, steps, on)
    rounds: dict[str, list[float]] = collections.defaultdict(list)
    for number in range(repeats):
        for on in (False, True) if number % 2 == 0 else (True, False):
            wall, cpu, process, own = observed_step(timed, steps, on)
            state = "on" if on else "off"
            rounds[f"wall {state}"].append(wall)
            rounds[f"thread CPU {state}"].append(cpu)
            rounds[f"process CPU {state}"].append(process)
            if on:
                rounds["observers"].append(own)
    return {name: statistics.median(values) for name, values in rounds.items()}


def observed_step(timed: list[Timed], steps: int, on: bool) -> tuple[float, float, float, float]:
    for each in timed:
        each.seconds = 0.0
        (observe if on else forget)(each)
    process = time.process_time()
    step = persisted_step(steps)
    process = time.process_time() - process
    for each in timed:
        forget(each)
    return step.wall, step.cpu, process / steps, sum(each.seconds for each in timed) / steps


# --- this tree beside another (`--project OLD`) ---------------------------------------------------


def compared(old: Path, repeats: int) -> None:
    """This tree's loop figures beside OLD's (a checkout of Loop whose bench/loop.py takes
    `--figures`), each measured by its own bench in a process of its own against this process's
    database, rounds alternating (which goes first too), so both meet the same server, disk and
    neighbours. Medians over the rounds; the ratio is this tree's figure over OLD's."""
    trees = {"this tree": Path(__file__).resolve().parent.parent, "OLD": old.resolve()}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for number in range(repeats):
        order = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in order:
            rounds[name].append(figures_of(trees[name]))
    ours, theirs = median_figures(rounds["this tree"]), median_figures(rounds["OLD"])
    print(f"The loop, this tree beside {trees['OLD']} ({repeats} rounds, medians, µs a step)")
    print(f"{'figure':<18}{'this tree':>12}{'OLD':>12}{'ratio':>9}")
    for key in ours:
        ratio = ours[key] / theirs[key]
        print(f"{key:<18}{ours[key] * 1e6:>12.1f}{theirs[key] * 1e6:>12.1f}{ratio:>8.2f}x")


def figures_of(tree: Path) -> dict[str, float]:
    """One round of `tree`'s own bench, in a child process on this process's database."""
    params = connection.get_connection_params()
    database = f"postgresql://{params['user']}@/{connection.settings_dict['NAME']}"
    env = {**os.environ, "DATABASE_URL": f"{database}?host={params['host']}"}
    command = [sys.executable, str(tree / "bench" / "loop.py"), "--repeats", "1", "--figures"]
    done = subprocess.run(  # noqa: S603 (our own command line)
        command, cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{tree}'s bench failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def median_figures(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(figures[key] for figures in rounds) for key in rounds[0]}


def round_trips(steps: int) -> str:
    """What a persisted step sends the server, counted where psycopg sends it (every statement,
    the pool's checks and Django's BEGIN and COMMIT among them), per step of a run of `steps`."""
    sent: collections.Counter[str] = collections.Counter()
    execute, command = psycopg.Cursor.execute, BaseConnection._exec_command

    def counted_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        sent[text.split(None, 1)[0].upper() if text.strip() else "an empty query"] += 1
        return execute(cursor, query, *args, **kwargs)

    def counted_command(connection: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
        sent[(sql.decode() if isinstance(sql, bytes) else str(sql)).split(None, 1)[0]] += 1
        return command(connection, sql, *args, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign,assignment]
    BaseConnection._exec_command = counted_command  # type: ignore[method-assign,assignment]
    try:
        persisted(steps)
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        BaseConnection._exec_command = command  # type: ignore[method-assign]
    total = sum(sent.values()) / steps
    each = ", ".join(f"{kind} {count / steps:.2f}" for kind, count in sent.most_common())
    return f"{total:.2f} ({each})"


# --- the model client's own cost per turn -----------------------------------------------------

WARM_UP_ROUNDS = 20
# What a run passes as a turn's timeout: the time it has left (the default limit is minutes).
TIME_LEFT = 300.0
# The turns timed: a run's second, and its tenth (the last LOOP_MAX_ITERATIONS allows by default).
TURNS = (2, 10)
DEMO_TASK = "Compute the sum of 1..100 and save it to a file"
# The calls earlier turns made, in turn, with what they gave back.
EARLIER_CALLS = (
    ("run_code", {"code": "print(sum(range(1, 101)))"}, "exit code 0\nstdout:\n5050\n"),
    ("write_file", {"path": "sum.txt", "content": "5050\n"}, "Wrote 5 bytes to sum.txt."),
    ("read_file", {"path": "sum.txt"}, "5050\n"),
)


@contextlib.contextmanager
def running_chat_server() -> Iterator[str]:
    """bench/_chat_server.py in a process of its own; yields its origin, http://127.0.0.1:<port>."""
    script = Path(__file__).resolve().parent / "_chat_server.py"
    server = subprocess.Popen(  # noqa: S603 (our own command line)
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{int(server.stdout.readline())}"
    finally:
        assert server.stdin is not None
        server.stdin.close()  # its signal to end
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def turn_messages(turn: int) -> list[Message]:
    """What a run at the demo task sends on its `turn`: the prompt, the task, and each earlier
    turn's call and its result."""
    messages: list[Message] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": DEMO_TASK},
    ]
    for number in range(turn - 1):
        name, arguments, result = EARLIER_CALLS[number % len(EARLIER_CALLS)]
        call = ToolCall(f"call_{number}", name, json.dumps(arguments))
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call.as_message_part()]},
            {"role": "tool", "tool_call_id": call.id, "content": result},
        ]
    return messages


class Timing(NamedTuple):
    """A span in wall-clock time and in this thread's CPU time, which a busy machine inflates
    less: other processes delay a turn but do not add to its CPU time."""

    wall: float
    cpu: float


def clock() -> Timing:
    return Timing(time.perf_counter(), time.thread_time())


def since(start: Timing) -> Timing:
    now = clock()
    return Timing(now.wall - start.wall, now.cpu - start.cpu)


@dataclasses.dataclass
class Exchange:
    """One provider's client at one turn, whole or streamed, and the bare exchange of the same
    request body by a plain httpx2 client."""

    label: str
    turn: int
    streamed: bool
    llm: ChatCompletionsLLM
    url: str
    messages: list[Message]
    specs: list[ToolSpec]
    client_turns: list[Timing] = dataclasses.field(default_factory=list)
    bare_turns: list[Timing] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.body = request_body(self.llm, self.messages, self.specs, self.streamed)
        self.bare_client = httpx2.Client(timeout=TIME_LEFT)
        self.headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "authorization": "Bearer bench",
        }

    def client_turn(self) -> Timing:
        started = clock()
        reply = self.llm.chat(self.messages, self.specs, timeout=TIME_LEFT)
        elapsed = since(started)
        assert reply.text == chat_server.TEXT, reply
        assert reply.tool_calls[0].arguments == chat_server.CALL_ARGUMENTS, reply
        return elapsed

    def bare_turn(self) -> Timing:
        started = clock()
        if self.streamed:
            with self.bare_client.stream(
                "POST", self.url, content=self.body, headers=self.headers
            ) as response:
                for _ in response.iter_bytes():
                    pass
        else:
            response = self.bare_client.post(self.url, content=self.body, headers=self.headers)
        elapsed = since(started)
        assert response.status_code == 200, response
        return elapsed

    def own(self, kind: str) -> list[float]:
        """The client's own cost of each round, in "wall" or "cpu" time."""
        pairs = zip(self.client_turns, self.bare_turns, strict=True)
        return [getattr(client, kind) - getattr(bare, kind) for client, bare in pairs]

    def close(self) -> None:
        self.bare_client.close()
        self.llm.close()


def request_body(
    llm: ChatCompletionsLLM, messages: list[Message], specs: list[ToolSpec], streamed: bool
) -> bytes:
    """What the client posts for this turn, encoded as httpx2 encodes JSON."""
    body: dict[str, Any] = {"messages": messages, "model": llm.model, **llm.request_options(specs)}
    if streamed:
        body["stream"] = True
        if llm.dialect.asks_stream_usage:
            body["stream_options"] = {"include_usage": True}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def exchanges(origin: str) -> list[Exchange]:
    """Groq and the OpenAI-compatible client at each turn, whole and streamed, each with its own
    client (and connection), as each run has."""
    specs = default_registry().specs()
    made = []
    for streamed in (False, True):
        for turn in TURNS:
            for label, llm, url in clients(origin, streamed):
                made.append(Exchange(label, turn, streamed, llm, url, turn_messages(turn), specs))
    return made


def clients(origin: str, streamed: bool) -> list[tuple[str, ChatCompletionsLLM, str]]:
    """(label, client, the URL it posts a turn to) of each provider, streaming to a no-op."""
    deltas = (lambda piece: None) if streamed else None
    groq_llm = GroqLLM("llama-3.1-8b-instant", api_key="bench", base_url=origin, deltas=deltas)
    openai_llm = OpenAICompatibleLLM(
        "llama3.1:8b", base_url=f"{origin}/v1", api_key="bench", deltas=deltas
    )
    return [
        (
            f"Groq (httpx2 {httpx2.__version__})",
            groq_llm,
            f"{origin}/openai/v1/chat/completions",
        ),
        (
            f"OpenAI-compatible (httpx2 {httpx2.__version__})",
            openai_llm,
            f"{origin}/v1/chat/completions",
        ),
    ]


def one_round(number: int, measured: list[Exchange], keep: bool) -> None:
    """Each exchange's bare turn and client turn; every other round in the reverse order."""
    steps = [(exchange, bare) for exchange in measured for bare in (True, False)]
    if number % 2:
        steps.reverse()
    for exchange, bare in steps:
        elapsed = exchange.bare_turn() if bare else exchange.client_turn()
        if keep:
            (exchange.bare_turns if bare else exchange.client_turns).append(elapsed)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[94]


def client_overhead(rounds: int) -> None:
    """Every exchange `rounds` times after the warm-up, against one fake server, then the table."""
    with running_chat_server() as origin:
        server_share = raw_exchange(origin, streamed_body(origin))
        measured = exchanges(origin)
        try:
            for number in range(WARM_UP_ROUNDS + rounds):
                one_round(number, measured, keep=number >= WARM_UP_ROUNDS)
        finally:
            for exchange in measured:
                exchange.close()
    print_overhead(measured, rounds, server_share)


def streamed_body(origin: str) -> bytes:
    """The OpenAI-compatible client's request at the first turn timed, streamed."""
    llm = OpenAICompatibleLLM("llama3.1:8b", base_url=f"{origin}/v1")
    llm.close()
    return request_body(llm, turn_messages(TURNS[0]), default_registry().specs(), True)


def raw_exchange(origin: str, body: bytes, times: int = 200) -> float:
    """The fake server's and loopback's share of a bare exchange: a streamed turn's request
    written to a socket and its whole reply read back, no HTTP library (median, seconds)."""
    host, port = origin.removeprefix("http://").split(":")
    request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n\r\n%s"
    request %= (host.encode(), len(body), body)
    expected = len(chat_server.STREAMED_RESPONSE)
    spans = []
    with socket.create_connection((host, int(port))) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(times):
            started, received = time.perf_counter(), 0
            connection.sendall(request)
            while received < expected:
                received += len(connection.recv(65536))
            spans.append(time.perf_counter() - started)
    return statistics.median(spans[times // 4 :])


def print_overhead(measured: list[Exchange], rounds: int, server_share: float) -> None:
    sizes = {exchange.turn: len(exchange.body) for exchange in measured if not exchange.streamed}
    print(
        f"\nThe model client's own cost per turn, in µs: {rounds} turns each after "
        f"{WARM_UP_ROUNDS} warm-up, fake server on loopback (its share, by a raw socket: "
        f"{server_share * 1e6:.0f} µs a streamed turn).\n"
        + "; ".join(f"turn {turn}'s request {size / 1000:.1f} kB" for turn, size in sizes.items())
        + f"; the reply a {len(chat_server.TEXT)}-character answer and one tool call, whole "
        f"({len(chat_server.PLAIN) / 1000:.1f} kB) or streamed ({len(chat_server.chunks())} "
        "chunks).\nown = client turn - bare exchange of the same bytes, in the same round; "
        "own CPU the same in this thread's CPU time."
    )
    print(
        f"{'client':<44}{'reply':<10}{'turn':>4}{'bare p50':>10}{'p95':>7}{'client p50':>12}"
        f"{'p95':>7}{'own p50':>9}{'p95':>7}{'own CPU p50':>13}"
    )
    for exchange in sorted(measured, key=lambda exchange: (exchange.streamed, exchange.turn)):
        bare, client, own = (
            (statistics.median(turns) * 1e6, p95(turns) * 1e6)
            for turns in (
                [timing.wall for timing in exchange.bare_turns],
                [timing.wall for timing in exchange.client_turns],
                exchange.own("wall"),
            )
        )
        print(
            f"{exchange.label:<44}{'streamed' if exchange.streamed else 'whole':<10}"
            f"{exchange.turn:>4}{bare[0]:>10.0f}{bare[1]:>7.0f}{client[0]:>12.0f}{client[1]:>7.0f}"
            f"{own[0]:>9.0f}{own[1]:>7.0f}{statistics.median(exchange.own('cpu')) * 1e6:>13.0f}"
        )
    print_margins(measured)


def print_margins(measured: list[Exchange]) -> None:
    """What a streamed chunk and an earlier turn in the history add to a client's own cost, from
    the CPU medians (steadier): streamed minus whole at the first turn timed, and the last turn
    minus the first, whole."""
    own = {
        (exchange.label, exchange.streamed, exchange.turn): statistics.median(exchange.own("cpu"))
        for exchange in measured
    }
    first, last = TURNS[0], TURNS[-1]
    for label in dict.fromkeys(exchange.label for exchange in measured):
        chunk = (own[label, True, first] - own[label, False, first]) / len(chat_server.chunks())
        earlier = (own[label, False, last] - own[label, False, first]) / (last - first)
        print(
            f"{label}: {round(chunk * 1e6)} µs CPU a streamed chunk, "
            f"{round(earlier * 1e6)} µs a turn for each earlier call and result in the history"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per loop figure")
    parser.add_argument("--turns", type=int, default=150, help="model turns per client figure")
    parser.add_argument("--only", choices=("loop", "clients"), help="one part of the two")
    parser.add_argument(
        "--project", type=Path, metavar="OLD", help="the loop's figures beside another checkout's"
    )
    parser.add_argument(
        "--figures", action="store_true", help="the loop's figures alone, as one JSON line"
    )
    parser.add_argument(
        "--observers", action="store_true", help="the persisted step, metrics and traces off and on"
    )
    parser.add_argument("--steps", type=int, default=50, help="steps a run, with --observers")
    options = parser.parse_args()
    if options.turns < 2:
        parser.error("--turns takes 2 or more (a p95 needs two)")
    if options.observers:
        observers_compared(options.steps, options.repeats)
    elif options.figures:
        try:
            print(json.dumps(loop_figures(options.repeats)))
        finally:
            forget_bench()
    elif options.project:
        compared(options.project, options.repeats)
    else:
        if options.only != "clients":
            loop_overhead(options.repeats)
        if options.only != "loop":
            client_overhead(options.turns)


if __name__ == "__main__":
    main()
