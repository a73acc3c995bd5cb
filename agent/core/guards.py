"""The guards that stop a run: a halt with its reason, the circuit breaker, a cancel, and the
release of a run this process no longer works."""

import json
from collections import defaultdict

from agent.core.events import EndCause, HaltReason
from agent.core.llm import ToolCall
from agent.core.results import ToolResult


class Halt(Exception):
    """A guard ends the run as `halted`. With `summarise`, the model gets one last turn;
    `error` is what went wrong when something besides a budget did (say, the provider was slow),
    and `cause` says which it was.
    """

    def __init__(
        self,
        reason: HaltReason,
        detail: str,
        *,
        summarise: bool,
        error: str = "",
        cause: EndCause | None = None,
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.summarise = summarise
        self.error = error
        self.cause = cause


class BreakerOpen(Halt):
    """The circuit breaker tripped: the halt names the tool and the failures (the record of it is
    agent.models.BreakerTrip). `recorded`: its BreakerTripped is in the log already (a resumed
    run halting on it)."""

    def __init__(
        self,
        reason: HaltReason,
        detail: str,
        tool: str,
        failures: list[dict[str, str]],
        *,
        recorded: bool = False,
    ) -> None:
        super().__init__(reason, detail, summarise=True)
        self.tool = tool
        self.failures = failures
        self.recorded = recorded


def trip_detail(reason: HaltReason, tool: str, count: int) -> str:
    """Why the breaker tripped, in words; `count`: the failures, or the identical calls."""
    if reason is HaltReason.REPEATED_FAILED_CALL:
        return f"{tool} was called again with the same arguments after that call failed."
    if reason is HaltReason.IDENTICAL_CALLS:
        return f"{tool} was called {count} times in a row with the same arguments."
    return f"{tool} failed {count} times in a row."


class Cancelled(Exception):
    """Someone asked the run to stop."""


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
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
    except ValueError:
        arguments = call.arguments
    return call.name, arguments


class Breaker:
    """Trips when calling on is pointless.

    Three ways: the same tool failing `max_failures` times in a row; the model asking again for a
    call identical to one that failed, with no success in between that could have changed things;
    the model asking for one identical call `max_identical` times in a row. Repeats are caught
    before they run, failures after.
    """

    def __init__(self, max_failures: int, max_identical: int) -> None:
        self.max_failures = max_failures
        self.max_identical = max_identical
        self.failures: defaultdict[str, list[dict[str, str]]] = defaultdict(list)
        self.failed: dict[tuple[str, str], str] = {}
        self.last: tuple[str, str] | None = None
        self.streak = 0

    def before(self, call: ToolCall) -> None:
        identity = call_identity(call)
        if identity in self.failed:
            raise BreakerOpen(
                HaltReason.REPEATED_FAILED_CALL,
                trip_detail(HaltReason.REPEATED_FAILED_CALL, call.name, 1),
                call.name,
                [{"arguments": call.arguments, "error": self.failed[identity]}],
            )
        self.streak = self.streak + 1 if identity == self.last else 1
        self.last = identity
        if self.streak >= self.max_identical:
            raise BreakerOpen(
                HaltReason.IDENTICAL_CALLS,
                trip_detail(HaltReason.IDENTICAL_CALLS, call.name, self.streak),
                call.name,
                [],
            )

    def after(self, call: ToolCall, result: ToolResult) -> BreakerOpen | None:
        """The trip this result causes, if any."""
        if result.ok:
            self.failures.pop(call.name, None)
            self.failed.clear()  # a call that worked may have changed what failed before
            return None
        self.failed[call_identity(call)] = result.text
        failures = self.failures[call.name]
        failures.append({"arguments": call.arguments, "error": result.text})
        if len(failures) < self.max_failures:
            return None
        return BreakerOpen(
            HaltReason.TOOL_FAILURES,
            trip_detail(HaltReason.TOOL_FAILURES, call.name, len(failures)),
            call.name,
            list(failures),
        )
