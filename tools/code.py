"""The run_code tool: a Python snippet in the configured sandbox, in the user's workspace.

Its report (exit status, stdout, stderr) is written by `describe` and read back only by
`parse_report`, so whoever reads what a snippet printed (the mock model) never copies the layout.
"""

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from sandbox.bubblewrap import WORKSPACE_MOUNT
from sandbox.errors import ProcessLimitReached, SandboxUnavailable
from sandbox.host import SandboxHost
from sandbox.policies import Limits
from sandbox.snippet import Execution, ForRun
from tools.base import Tool, ToolContext, ToolDenied, ToolError, ToolOutput, ToolTimeout

MAX_TIMEOUT = 60
MAX_CODE_CHARS = 100_000
# What the model reads (as "ERROR: " + this) when the run was stopped while its snippet ran.
STOPPED = (
    "stopped: the run was stopped while this snippet ran, so it was killed; what it wrote "
    "before that was saved."
)


class RunCodeArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        min_length=1,
        max_length=MAX_CODE_CHARS,
        description="A complete Python 3 program. Print what you want to see; stdout and stderr "
        "come back to you.",
    )
    timeout: int = Field(
        default=10,
        ge=1,
        le=MAX_TIMEOUT,
        description=f"Seconds before the program is killed (1 to {MAX_TIMEOUT}).",
    )


# What a call reads where its process handed its tools no sandbox host (SandboxHost).
NO_HOST = "no sandbox host was handed to this process's tools (tools.base.ToolContext.sandbox)"


def run_code(arguments: RunCodeArguments, context: ToolContext) -> ToolOutput:
    execution = execute(arguments, context)
    report = describe(execution)
    if execution.files_note:  # before the report, which parse_report reads at the end
        report = f"{execution.files_note}\n{report}"
    if execution.stopped:
        raise ToolError(f"{STOPPED}\n{report}", policy=execution.policy)
    if execution.memory_exceeded is not None:
        raise ToolError(
            f"{execution.memory_exceeded.describe()}\n{report}", policy=execution.policy
        )
    if execution.timed_out:
        raise ToolTimeout(
            f"Killed after {arguments.timeout} seconds (timeout).\n{report}",
            policy=execution.policy,
        )
    if execution.exit_status != 0 or not execution.files_saved:
        raise ToolError(report, policy=execution.policy)
    return ToolOutput(report, policy=execution.policy)


def execute(arguments: RunCodeArguments, context: ToolContext) -> Execution:
    """The snippet, run in the sandbox of the context's host; why it could not run, said as a
    tool's refusal or failure."""
    run = (
        None if context.run_id is None else ForRun(context.run_id, context.stopped, context.attempt)
    )
    try:
        sandbox = host_of(context).sandbox()
        return sandbox.run(
            arguments.code, context.workspace, Limits.from_settings(arguments.timeout), run=run
        )
    except SandboxUnavailable as error:
        raise ToolDenied(str(error), policy=error.policy) from error
    except ProcessLimitReached as error:
        raise ToolError(str(error), policy=error.policy) from error


def host_of(context: ToolContext) -> SandboxHost:
    if context.sandbox is None:
        raise SandboxUnavailable(f"run_code cannot run: {NO_HOST}")
    return context.sandbox


KILLED = "killed"
EMPTY = "(empty)"
CAPPED = "[output over the cap was discarded]"
_REPORT = re.compile(
    rf"(?:^|\n)exit status: (?P<status>{KILLED}|-?\d+)\n--- stdout ---\n(?P<stdout>.*?)\n"
    r"--- stderr ---\n"
    rf"(?P<stderr>.*?)(?P<capped>\n{re.escape(CAPPED)})?\Z",
    re.S,
)


@dataclass(frozen=True)
class Report:
    """A snippet's report as `parse_report` reads it back; `exit_status` None: it was killed.
    `lead`: what a failure's message says before the report (a timeout, a stop, saved files)."""

    exit_status: int | None
    stdout: str
    stderr: str
    output_truncated: bool
    lead: str = ""


def describe(execution: Execution) -> str:
    """The report the model reads; `parse_report` is its one reader."""
    status = KILLED if execution.exit_status is None else str(execution.exit_status)
    lines = [f"exit status: {status}"]
    for name, text in (("stdout", execution.stdout), ("stderr", execution.stderr)):
        lines += [f"--- {name} ---", text.rstrip("\n") if text else EMPTY]
    if execution.output_truncated:
        lines.append(CAPPED)
    return "\n".join(lines)


def parse_report(text: str) -> Report | None:
    """The report `describe` wrote, at the end of `text` (a failure's message may lead it: a
    timeout, a stop); None when `text` holds none (say, the result was cut to the tool's cap)."""
    found = _REPORT.search(text)
    if found is None:
        return None
    status = found["status"]
    return Report(
        exit_status=None if status == KILLED else int(status),
        stdout=_printed(found["stdout"]),
        stderr=_printed(found["stderr"]),
        output_truncated=found["capped"] is not None,
        lead=text[: found.start()].strip(),
    )


def _printed(shown: str) -> str:
    return "" if shown == EMPTY else shown


RUN_CODE = Tool(
    name="run_code",
    description=(
        "Run a Python 3 program in an isolated sandbox with no network access. The working "
        f"directory is your workspace ({WORKSPACE_MOUNT}), the same files read_file and "
        "write_file see; only the standard library is available. What it writes is saved "
        "when it ends, within your workspace's quota; writes past the quota fail. Returns the "
        "exit status, stdout and stderr."
    ),
    arguments=RunCodeArguments,
    function=run_code,
    timeout=MAX_TIMEOUT + 15,
)
