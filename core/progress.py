"""A run's progress told in words: what worked, what failed and why, what was stopped or never ran.

The answer of a run that ended without the model's own account (a Stop, a halt with no summary,
a failure) is this, and the mock model's summary of a halted run says the same. A person reads it
above the run's cards, which keep every tool's whole output: so it never quotes an output, only a
failure's reason, once however many times it came.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.results import ToolStatus
from core.text import excerpt

# What a failure's reason is cut to, and the layout of run_code's report that it skips over.
REASON_CHARS = 200
_STDERR = "--- stderr ---"
_STDOUT = "--- stdout ---"
_EXIT = "exit status: "
_EMPTY = "(empty)"


@dataclass(frozen=True)
class Outcome:
    """One tool call as its progress tells it: the tool, its status, the text it returned;
    `stopped`: it failed because a Stop cut it short."""

    tool: str
    status: ToolStatus
    text: str
    stopped: bool = False


def progress_in_words(outcomes: Iterable[Outcome]) -> list[str]:
    """One line per kind of outcome: the tools that worked, each distinct failure (tool and
    reason) with how many times it came, the calls a Stop cut short, the calls that never ran;
    nothing for a run that called no tool."""
    worked: dict[str, int] = {}
    failed: dict[tuple[str, str], int] = {}
    stopped: dict[str, int] = {}
    unfinished: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.status is ToolStatus.OK:
            worked[outcome.tool] = worked.get(outcome.tool, 0) + 1
        elif outcome.stopped:
            stopped[outcome.tool] = stopped.get(outcome.tool, 0) + 1
        elif outcome.status in (ToolStatus.SKIPPED, ToolStatus.INTERRUPTED):
            unfinished[outcome.tool] = unfinished.get(outcome.tool, 0) + 1
        else:
            key = (outcome.tool, failure_reason(outcome.status, outcome.text))
            failed[key] = failed.get(key, 0) + 1
    lines = []
    if worked:
        lines.append(f"What worked: {tools_in_words(worked)}.")
    for (tool, reason), times in failed.items():
        lines.append(
            f"What failed: {tool}{', ' + str(times) + ' times' if times > 1 else ''} — {reason}"
        )
    if stopped:
        lines.append(f"Stopped while running: {tools_in_words(stopped)}.")
    if unfinished:
        lines.append(f"Not finished: {tools_in_words(unfinished)} (the run ended first).")
    return lines


def tools_in_words(counts: dict[str, int]) -> str:
    """ "run_code (2 calls), write_file": each tool once, with its calls when more than one."""
    return ", ".join(
        tool if times == 1 else f"{tool} ({times} calls)" for tool, times in counts.items()
    )


def failure_reason(status: ToolStatus, text: str) -> str:
    """Why a call failed, in one line: a snippet's last line of stderr (its exception), or the
    message before its report; any other tool's first line."""
    lines = [line.strip() for line in text.splitlines()]
    reason = snippet_reason(lines) if _STDERR in lines else ""
    reason = reason or next((line for line in lines if line), "")
    if status is ToolStatus.TIMEOUT and "time" not in reason.lower():
        reason = f"timed out: {reason}"
    reason = excerpt(reason or status.value, REASON_CHARS)
    return reason if reason.endswith((".", "…", "?", "!")) else reason + "."


def snippet_reason(lines: Sequence[str]) -> str:
    """run_code's report: the last line of its stderr, else the note that leads the report, else
    its exit status in words."""
    stderr = lines[lines.index(_STDERR) + 1 :]
    printed = [line for line in stderr if line and line != _EMPTY and not line.startswith("[")]
    if printed:
        return printed[-1]
    lead = [line for line in lines if line][: max(lines.index(_STDOUT) - 1, 0)]
    lead = [line for line in lead if not line.startswith(_EXIT)]
    if lead:
        return lead[0]
    exit_line = next((line for line in lines if line.startswith(_EXIT)), "")
    return f"it ended with exit status {exit_line.removeprefix(_EXIT)}" if exit_line else ""
