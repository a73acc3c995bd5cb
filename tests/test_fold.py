"""A run's state is one fold over its events (core.state): a live run and a replay of its log reach
equal states.

For a few hundred seeded random runs (random limits, model replies, tool outcomes, calls that ask
for a decision and the decisions made, messages the person sends meanwhile, a worker lost at a
random point of the log, a Continue after the end), the loop is driven with scripted replies and
tool results so that it writes a log, and at every model turn and at every end:
- what the model is sent is the replay of the log as stored (every event read back from its
  JSON), so a message, a counter or a breaker the live path kept beside the fold would show;
- the run's state as it comes out equals the replay of its stored log, field by field;
- the counters the run's end records are what the log says (counted here, not folded).
"""

import dataclasses
import json
import random
from collections.abc import Sequence

import pytest

from core.approval import Ask
from core.ending import Ended, Parked, Released, RunResult
from core.events import (
    ApprovalDecided,
    Decision,
    Event,
    ModelReplied,
    ResumeReason,
    RunResumed,
    ToolCallStarted,
    event_from_dict,
)
from core.guards import Limits
from core.interrupt import Interrupt, StopReason
from core.llm import LLMError, Message, Reply, ToolCall, ToolSpec, Usage
from core.loop import run_agent
from core.results import Remedy, ToolResult, ToolStatus
from core.run import PersonMessage
from core.state import RunState, replay
from tests.test_loop import assert_history_valid

pytestmark = pytest.mark.fast

RUNS = 200
TOOLS = ("ok", "fail", "flip", "held", "effect")


def stored(log: Sequence[Event]) -> list[Event]:
    """The log as a worker reads it back: each event from the JSON it is stored as."""
    return [event_from_dict(event.kind, json.loads(json.dumps(event.as_dict()))) for event in log]


class Script:
    """The model: random replies, each turn checked against the replay of the log so far."""

    provider = model = "scripted"

    def __init__(self, rng: random.Random, log: list[Event]) -> None:
        self.rng, self.log, self.turn = rng, log, 0
        self.interrupt = Interrupt()  # the session's: a Stop, or its worker handing it back

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        assert messages == replay(stored(self.log)).messages
        self.turn += 1
        if self.rng.random() < 0.03:
            raise LLMError("the provider is down")
        if (roll := self.rng.random()) < 0.04:
            self.interrupt.set(StopReason.CANCEL if roll < 0.02 else StopReason.HAND_BACK)
        usage = Usage(self.rng.randint(1, 60), self.rng.randint(1, 20))
        if tools is None or self.rng.random() < 0.15:
            cut, help = self.rng.random() < 0.2, self.rng.random() < 0.1
            return Reply(text=f"answer {self.turn}", usage=usage, cut=cut, help=help)
        calls = tuple(
            ToolCall(
                f"c{self.turn}_{n}",
                self.rng.choice(TOOLS),
                json.dumps({"n": self.rng.randint(0, 2)}),
            )
            for n in range(self.rng.randint(1, 3))
        )
        text = self.rng.choice(["", f"thinking {self.turn}"])
        return Reply(text=text, tool_calls=calls, usage=usage)


class Outcomes:
    """The tools: each call's result follows from its name and arguments alone."""

    def specs(self) -> list[ToolSpec]:
        return []

    def dispatch(self, name: str, arguments: str) -> ToolResult:
        n = json.loads(arguments).get("n", 0)
        if name == "fail" or (name == "flip" and n % 2):
            return ToolResult(ToolStatus.ERROR, f"{name} broke on {n}", 0.001)
        if name == "held":
            return ToolResult(ToolStatus.ERROR, "on hold", 0.0, remedy=Remedy.REVIEW)
        return ToolResult(ToolStatus.OK, f"{name} did {n}", 0.001234567)


def random_limits(rng: random.Random) -> Limits:
    return Limits(
        max_iterations=rng.randint(2, 6),
        max_tokens=rng.choice([1_000_000, 250]),
        max_tool_calls=rng.randint(2, 10),
        max_tool_failures=rng.randint(2, 3),
        max_identical_calls=rng.randint(2, 3),
        max_parallel_calls=rng.randint(1, 3),
    )


def asks(call: ToolCall) -> Ask | None:
    return Ask("asks before effect") if call.name == "effect" else None


def check(log: list[Event], result: RunResult) -> None:
    """The run's state is the replay of its stored log; its end's figures are the log's."""
    replayed = replay(stored(log))
    assert result.state == replayed
    if not isinstance(result, Ended):
        return
    assert_history_valid(replayed.messages)
    replies = [event for event in log if isinstance(event, ModelReplied)]
    end = result.end
    assert end.iterations == max((reply.step for reply in replies), default=0)
    assert end.tool_calls == sum(isinstance(event, ToolCallStarted) for event in log)
    assert end.prompt_tokens == sum(reply.prompt_tokens for reply in replies)
    assert end.completion_tokens == sum(reply.completion_tokens for reply in replies)


def decide(rng: random.Random, parked: Parked, log: list[Event]) -> None:
    """Every call the run waits on decided, at random; the run's parking recorded first."""
    log += parked.awaiting
    state = replay(log)
    for request in state.asked.values():
        if request.call_id in state.decisions:
            continue
        decision = rng.choice(list(Decision))
        edit = json.dumps({"n": rng.randint(0, 2)}) if decision is Decision.EDIT else ""
        log.append(
            ApprovalDecided(
                step=request.step,
                call_id=request.call_id,
                tool=request.tool,
                decision=decision,
                arguments=edit,
                reason="no" if decision is Decision.DENY else "",
                by="alice",
            )
        )
    log.append(RunResumed(attempt=1, reason=ResumeReason.DECIDED))


def next_session(rng: random.Random, result: RunResult, log: list[Event], limits: Limits) -> bool:
    """What happens to the run next: decided, continued, or its worker lost at a random point
    of its log (the log is cut there). False: it is left as it is."""
    if isinstance(result, Parked):
        decide(rng, result, log)
        return True
    if isinstance(result, Released):
        log.append(RunResumed(reason=ResumeReason.HANDED_BACK, limits=dataclasses.asdict(limits)))
        return True
    roll = rng.random()
    if roll < 0.3 and isinstance(result, Ended):
        more = dataclasses.asdict(random_limits(rng))
        log.append(RunResumed(reason=ResumeReason.CONTINUED, note="[Loop] go on", limits=more))
        return True
    if roll < 0.6:
        del log[rng.randint(1, len(log)) :]
        log.append(RunResumed(reason=ResumeReason.WORKER_LOST, limits=dataclasses.asdict(limits)))
        return True
    return False


@pytest.mark.parametrize("seed", range(RUNS))
def test_a_live_run_and_a_replay_of_its_log_reach_equal_states(seed):
    rng = random.Random(seed)  # noqa: S311 (a test's draw, not a secret)
    log: list[Event] = []
    limits = random_limits(rng)
    model = Script(rng, log)
    said = [PersonMessage(n, f"also {n}") for n in range(rng.randint(0, 3))]

    def inbox() -> Sequence[PersonMessage]:
        return said[: model.turn // 2]

    parts = dict(llm=model, tools=Outcomes(), sink=log.append, inbox=inbox)
    interrupt = model.interrupt
    result = run_agent("the task", limits=limits, interrupt=interrupt, approval=asks, **parts)
    check(log, result)
    for _ in range(4):
        if not next_session(rng, result, log, limits):
            break
        resume: RunState = replay(stored(log))
        model.interrupt = interrupt = Interrupt()
        result = run_agent("the task", resume=resume, interrupt=interrupt, approval=asks, **parts)
        check(log, result)


def test_the_check_fails_when_the_live_path_keeps_something_beside_the_fold(monkeypatch):
    """A live loop that put a message in its history without an event would be caught."""
    from core.run import RunCourse

    emit = RunCourse.emit

    def emit_and_more(self: RunCourse, event: Event) -> None:
        emit(self, event)
        if isinstance(event, ModelReplied):
            self.state.messages.append({"role": "user", "content": "said beside the log"})

    monkeypatch.setattr(RunCourse, "emit", emit_and_more)
    with pytest.raises(AssertionError):
        some_runs(range(20))


def some_runs(seeds: range) -> None:
    for seed in seeds:
        test_a_live_run_and_a_replay_of_its_log_reach_equal_states(seed)
