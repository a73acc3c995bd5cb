"""The tool protocol: a tool is a name, a description, a pydantic argument model and a function.

`ToolRegistry.dispatch` turns a model's raw call (a name and a JSON string) into a `ToolResult`.
Whatever goes wrong, an unknown tool, bad JSON, invalid arguments, a raising or hung tool, becomes
an error result the model can read and act on; nothing escapes the dispatcher as an exception.
"""

import copy
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from core.results import Remedy, ToolResult, ToolStatus

if TYPE_CHECKING:
    from sandbox.host import SandboxHost

logger = logging.getLogger(__name__)


class ToolError(Exception):
    """A failure the model should see as the tool's result (not a crash)."""

    status = ToolStatus.ERROR
    # What its person must do before the tool works again (a lost grant: reconnect).
    remedy: Remedy | None = None

    def __init__(self, message: str, *, policy: str = "", saved: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.policy = policy
        self.saved = saved  # the files it saved before it failed (an MCP error's images)


class ToolTimeout(ToolError):
    status = ToolStatus.TIMEOUT


class ToolDenied(ToolError):
    """A request refused on purpose: outside the workspace, no safe sandbox, and the like."""

    status = ToolStatus.DENIED


@dataclass(frozen=True)
class ToolContext:
    """Whom a call acts for. Set by server code from the run's owner, never by the model."""

    user_id: int
    username: str
    workspace: Path
    run_id: int | None = None  # the run calling, for the audit trail of what a tool stored
    # The run's attempt as its worker claimed it: a snippet's files are fenced by it, as the run's
    # events are (sandbox/fence.py).
    attempt: int = 0
    # Whether the run has been stopped (its interrupt is set): a snippet that reaches its sandbox
    # after SandboxHost.kill_run(run_id) looked is killed at once instead of running on.
    stopped: Callable[[], bool] | None = None
    # The sandboxes of the process working the call, which run_code runs its snippet in: its
    # owner's (the worker's, an in-process runner's); None: run_code refuses.
    sandbox: "SandboxHost | None" = None


@dataclass(frozen=True)
class ToolOutput:
    """What a tool function returns: its text, the sandbox policy that produced it, if any, and
    the files it saved in its person's workspace (ToolResult.saved)."""

    text: str
    policy: str = ""
    saved: tuple[str, ...] = ()


ToolFunction = Callable[[Any, ToolContext], ToolOutput | str]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[BaseModel]
    function: ToolFunction
    timeout: float = 60.0
    # A tool that cannot hang (it has nothing to wait on) may run in the caller's thread; any
    # other runs in a backstop thread that gives up on it after `timeout`.
    own_deadline: bool = False
    # The tool's own rule on asking (core.approval): where the site or the person asks
    # before this tool, whether this call (its arguments checked already) is one to ask about.
    # None: every call is.
    asks: Callable[[Any, ToolContext], bool] | None = None
    # Why its calls wait for a decision whatever the site's and the person's modes say (an MCP
    # tool's default, mcp_servers/tools.py); "": the modes decide.
    default_ask: str = ""
    # Its calls ask even where its person allowed it for the conversation (a tool its server
    # calls destructive).
    always_ask: bool = False
    # The MCP server it is a tool of (mcp_servers/tools.py), None for Loop's own: a
    # conversation's "always allow" is bound to the tool's name and this.
    server_id: int | None = None

    def spec(self) -> dict[str, Any]:
        """The function-calling spec (OpenAI / Groq format) the model sees: a copy of its own,
        made once per tool (pydantic builds a JSON schema anew at each call, which cost every
        run about 5 ms for the built-in tools)."""
        return copy.deepcopy(spec_of(self))


def spec_of(tool: Tool) -> dict[str, Any]:
    return _spec(tool.name, tool.description, tool.arguments)


# Keyed by what the spec is made of, not by the tool: an MCP tool is a new Tool at each run (it
# acts for the run's person) with the same name, description and arguments class as the last.
@functools.lru_cache(maxsize=1024)  # a tool set that changes (MCP servers') stays bounded
def _spec(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": arguments.model_json_schema(),
        },
    }


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Keep the head and the tail of a long text, with a note saying how much was cut."""
    if len(text) <= limit:
        return text, False
    head = limit * 3 // 4
    tail = limit - head
    cut = len(text) - limit
    note = f"\n[... truncated: {cut} of {len(text)} characters omitted ...]\n"
    return text[:head] + note + text[len(text) - tail :], True


# The error a call of a tool the run was not given is refused with (saying why it may not be
# called), or None when no such tool is known.
Withdrawn = Callable[[str], ToolError | None]


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        max_result_chars: int = 16_000,
        withdrawn: Withdrawn | None = None,
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.max_result_chars = max_result_chars
        # Asked only of a name not among `tools` (an MCP tool held or turned off since a call of
        # it was asked for): its call is refused saying why, not as an unknown tool.
        self.withdrawn = withdrawn

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools.values()]

    def bind(self, context: ToolContext) -> "BoundTools":
        return BoundTools(self, context)

    def dispatch(self, name: str, raw_arguments: str, context: ToolContext) -> ToolResult:
        started = time.monotonic()
        try:
            tool = self._tool(name)
            arguments = tool.arguments.model_validate(_parse(raw_arguments))
            if tool.own_deadline:
                output = _call(tool, arguments, context)
            else:
                output = _call_with_deadline(tool, arguments, context)
            status, remedy = ToolStatus.OK, None
        except ValidationError as error:
            output, status = ToolOutput(_describe_invalid(name, error)), ToolStatus.ERROR
            remedy = None
        except ToolError as error:
            output, status = ToolOutput(str(error), error.policy, error.saved), error.status
            remedy = error.remedy
        text, truncated = truncate(output.text, self.max_result_chars)
        duration = time.monotonic() - started
        return ToolResult(
            status, text, duration, output.policy, truncated, remedy=remedy, saved=output.saved
        )

    def _tool(self, name: str) -> Tool:
        if name not in self.tools:
            refusal = self.withdrawn(name) if self.withdrawn is not None else None
            if refusal is not None:
                raise refusal
            known = ", ".join(sorted(self.tools))
            raise ToolError(f"Unknown tool {name!r}. Available tools: {known}.")
        return self.tools[name]


class BoundTools:
    """The registry as one run sees it: every call acts for the run's user."""

    def __init__(self, registry: ToolRegistry, context: ToolContext) -> None:
        self.registry = registry
        self.context = context
        self._specs = registry.specs()

    def specs(self) -> list[dict[str, Any]]:
        return self._specs

    def dispatch(self, name: str, raw_arguments: str) -> ToolResult:
        return self.registry.dispatch(name, raw_arguments, self.context)


def _parse(raw_arguments: str) -> Any:
    if not raw_arguments.strip():
        return {}
    try:
        return json.loads(raw_arguments)
    except json.JSONDecodeError as error:
        raise ToolError(f"Arguments are not valid JSON ({error}). Send a JSON object.") from None


def _describe_invalid(name: str, error: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
        for problem in error.errors()
    )
    return f"Invalid arguments for {name}: {problems}."


def _call(tool: Tool, arguments: BaseModel, context: ToolContext) -> ToolOutput:
    try:
        output = tool.function(arguments, context)
    except ToolError:
        raise
    except (Exception, SystemExit) as error:  # a tool's bug is its result, not the worker's end
        logger.exception("Tool %s raised", tool.name)
        raise ToolError(f"{tool.name} failed: {type(error).__name__}: {error}") from None
    return output if isinstance(output, ToolOutput) else ToolOutput(output)


def _call_with_deadline(tool: Tool, arguments: BaseModel, context: ToolContext) -> ToolOutput:
    """Run the tool in its own thread so a hung tool cannot hold the run past its timeout.

    A thread cannot be killed: this backstop keeps the run moving, and the abandoned thread ends
    when the tool does.
    """
    box: dict[str, ToolOutput | BaseException] = {}

    def call() -> None:
        try:
            box["result"] = _call(tool, arguments, context)
        except BaseException as error:
            box["result"] = error

    worker = threading.Thread(target=call, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(tool.timeout)
    if worker.is_alive():
        raise ToolTimeout(f"{tool.name} did not finish within {tool.timeout:g} seconds.")
    result = box["result"]
    if isinstance(result, BaseException):
        raise result
    return result
