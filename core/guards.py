"""The guards that stop a run: its limits, a halt with its reason, the circuit breaker, and the
release of a run this process no longer works."""

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.events import EndCause, HaltReason
from core.llm import ToolCall
from core.results import ToolResult

# How much of an error's first line the breaker's words quote.
ERROR_CHARS = 200


@dataclass(frozen=True)
class Limits:
    """What a run may spend: its guards halt it at these."""

    max_iterations: int = 10
    max_seconds: float = 600.0
    max_tokens: int = 200_000
    max_tool_calls: int = 50
    max_tool_failures: int = 3
    max_identical_calls: int = 3
    max_parallel_calls: int = 4


@dataclass(frozen=True)
class Halt:
    """A guard ends the run as `halted` (a turn's outcome, core.turn). With `summarise`, the
    model gets one last turn; `error` is what went wrong when something besides a budget did
    (say, the provider was slow), and `cause` says which it was."""

    reason: HaltReason
    detail: str
    summarise: bool
    error: str = ""
    cause: EndCause | None = None


@dataclass(frozen=True)
class Trip(Halt):
    """The circuit breaker tripped: the halt names the tool and the failures (the record of it is
    agent.models.BreakerTrip). `recorded`: its BreakerTripped is in the log already (a resumed
    run halting on it)."""

    summarise: bool = True
    tool: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)
    recorded: bool = False


def trip_detail(
    reason: HaltReason, tool: str, count: int, failures: Sequence[dict[str, str]] = ()
) -> str:
    """Why the breaker tripped, in words; `count`: the failures, or the identical calls;
    `failures`: the distinct errors, which the words quote (the first line of each, shortened)."""
    why = errors_in_words(failures)
    if reason is HaltReason.REPEATED_FAILED_CALL:
        return f"{tool} was called again with the same arguments after that call failed{why}"
    if reason is HaltReason.IDENTICAL_CALLS:
        return f"{tool} was called {count} times in a row with the same arguments."
    return f"{tool} failed {count} times in a row{why}"


def failed_again_detail(tool: str, failures: Sequence[dict[str, str]]) -> str:
    """A Continue ran into the very failure that had tripped the breaker before it."""
    why = errors_in_words(failures)
    return f"{tool} failed again after the Continue, the same way as before it{why}"


def errors_in_words(failures: Sequence[dict[str, str]]) -> str:
    """ ": " and the distinct errors, each as its first line, shortened; "." when none."""
    errors = list(dict.fromkeys(first_line(failure.get("error", "")) for failure in failures))
    errors = [error for error in errors if error]
    if not errors:
        return "."
    return ": " + "; ".join(errors) + ("" if errors[-1].endswith(".") else ".")


def first_line(text: str, most: int = ERROR_CHARS) -> str:
    """An error's first non-empty line, shortened: what a person reads of why a call failed."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= most else line[: most - 1].rstrip() + "…"


class RunReleased(Exception):
    """This process no longer works the run: nothing more may be recorded for it here.

    Raised by the sink (the recorder's RunLost: its write was fenced off, or the database is gone)
    or by the loop itself (HandedBack). The loop ends the run there and records nothing more, not
    even the run's end, so whoever works the run now is the only one writing to it: run_agent
    returns a result that says it was released.
    """


class HandedBack(RunReleased):
    """The worker is stopping and hands the run back, to be resumed from its log elsewhere."""


def call_identity(call: ToolCall) -> tuple[str, str]:
    """Same tool, same arguments: key order and whitespace in the JSON do not make a call new."""
    return _identity(call.name, call.arguments)


@functools.lru_cache(maxsize=256)
def _identity(name: str, arguments: str) -> tuple[str, str]:
    """A call's identity is asked for before it runs and again once it ran: read once."""
    try:
        return name, json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return name, arguments


@dataclass
class Breaker:
    """Trips when calling on is pointless.

    Three ways: the same tool failing `max_failures` times in a row; the model asking again for a
    call identical to one that failed, with no success in between that could have changed things;
    the model asking for one identical call `max_identical` times in a row. Repeats are caught
    before they run, failures after. A failure it already holds is not listed twice: the trip's
    list has each distinct error once, with how many `times` it came.

    After a Continue it remembers the errors of the trip that halted the run (`remember_trip`):
    the same tool failing the same way again trips it at once, rather than after another
    `max_failures` tries, until a call works (which may have changed what failed).

    A run's breaker is part of its state (core.state): the fold moves it on with each call's
    result; `before` asks it about a call about to start (`probe` first: a copy to ask).
    """

    max_failures: int = 3
    max_identical: int = 3
    failures: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    in_a_row: dict[str, int] = field(default_factory=dict)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    tripped_on: dict[str, set[str]] = field(default_factory=dict)
    last: tuple[str, str] | None = None
    streak: int = 0

    def probe(self) -> "Breaker":
        """A copy to ask `before` about calls not finished yet, leaving this one as it is (it
        shares what `before` only reads)."""
        return Breaker(
            self.max_failures,
            self.max_identical,
            failed=self.failed,
            last=self.last,
            streak=self.streak,
        )

    def remember_trip(self, tool: str, failures: Iterable[dict[str, str]]) -> None:
        """The trip a Continue went on after: its errors trip the breaker at once if they come
        again."""
        errors = {failure["error"] for failure in failures if failure.get("error")}
        if errors:
            self.tripped_on[tool] = errors

    def before(self, call: ToolCall) -> Trip | None:
        """The trip the call causes before it runs, if any; it counts as the latest call."""
        identity = call_identity(call)
        if identity in self.failed:
            failures = [{"arguments": call.arguments, "error": self.failed[identity]}]
            reason = HaltReason.REPEATED_FAILED_CALL
            detail = trip_detail(reason, call.name, 1, failures)
            return Trip(reason, detail, tool=call.name, failures=failures)
        self.streak = self.streak + 1 if identity == self.last else 1
        self.last = identity
        if self.streak >= self.max_identical:
            reason = HaltReason.IDENTICAL_CALLS
            detail = trip_detail(reason, call.name, self.streak)
            return Trip(reason, detail, tool=call.name)
        return None

    def after(self, call: ToolCall, result: ToolResult) -> Trip | None:
        """The trip this result causes, if any."""
        if result.ok:
            self.failures.pop(call.name, None)
            self.in_a_row.pop(call.name, None)
            self.failed.clear()  # a call that worked may have changed what failed before
            self.tripped_on.clear()
            return None
        self.failed[call_identity(call)] = result.text
        failure = {"arguments": call.arguments, "error": result.text}
        if result.text in self.tripped_on.get(call.name, ()):
            failures = [failure | {"times": "1"}]
            detail = failed_again_detail(call.name, failures)
            return Trip(HaltReason.REPEATED_FAILED_CALL, detail, tool=call.name, failures=failures)
        failures = self.failures.setdefault(call.name, [])
        add_failure(failures, failure)
        count = self.in_a_row[call.name] = self.in_a_row.get(call.name, 0) + 1
        if count < self.max_failures:
            return None
        detail = trip_detail(HaltReason.TOOL_FAILURES, call.name, count, failures)
        listed = [dict(failure) for failure in failures]
        return Trip(HaltReason.TOOL_FAILURES, detail, tool=call.name, failures=listed)


def add_failure(failures: list[dict[str, str]], failure: dict[str, str]) -> None:
    """One more failure: a new error is listed (with the arguments it first came with), an
    error already listed counts one more time."""
    for listed in failures:
        if listed["error"] == failure["error"]:
            listed["times"] = str(int(listed.get("times", "1")) + 1)
            return
    failures.append(failure | {"times": "1"})


def failure_count(failures: Sequence[dict[str, str]]) -> int:
    """How many failures a trip's list stands for (a list from before the deduplication has no
    `times`: one each)."""
    return sum(
        int(times) if (times := failure.get("times", "1")).isdigit() else 1 for failure in failures
    )
