"""The keyless default model: deterministic, and able to work a documented set of task shapes.

It reads the task and the tool results so far from the messages, the way a real model would, and
plans the next tool call or the answer. docs/agent.md lists the task shapes it understands; for any
other task it says plainly that it is a mock.

What other modules wrote into the messages (a tool result's status, Loop's notes, the summary
request, the recalled memories, run_code's report, a run's outcome memory) it reads through their
own readers, so rewording any of them cannot quietly change what it does.
"""

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.llm.tokens import count_prompt_tokens, count_tokens
from core.approval import EXPIRED_TEXT, denial_in
from core.history import (
    is_loop_note,
    memories_in,
    memory_line,
    parse_tool_message,
    summary_detail,
)
from core.interrupt import Interrupt
from core.llm import Message, ModelTimedOut, Reply, ToolCall, ToolSpec, Usage
from core.progress import Outcome, failure_reason, progress_in_words
from core.results import ToolStatus
from mcp_servers.results import said_in
from memory.hygiene import outcome_answer
from tools.code import STOPPED, parse_report
from tools.files import is_empty_file_note

FILE_NAME = r"([\w\-/]+\.\w+)"
RANGE_SUM = re.compile(r"sum of (\d+)\s*(?:\.\.|to|through|-)\s*(\d+)", re.I)
LISTED_SUM = re.compile(r"(?:sum|add|total) (?:of )?(\d+(?:\s*(?:,|and|\+)\s*\d+)+)", re.I)
EXPRESSION = re.compile(r"-?[\d(][\d\s.()+\-*/%^]*[+\-*/%^][\d\s.()+\-*/%^]*[\d)]")
SAVE_SUM = re.compile(r"^(?=.*\b(?:save|write|store)\b).*?" + RANGE_SUM.pattern, re.I | re.S)
NAMED_FILE = re.compile(rf"(?:to|in|into|as|named|called)\s+(?:a\s+)?(?:file\s+)?{FILE_NAME}", re.I)
KEEP_READING = re.compile(rf"keep (?:reading|trying to read|checking) {FILE_NAME}", re.I)
WRITE_TEXT = re.compile(
    rf"(?:save|write|store|put)\s+[\"'“](.+?)[\"'”]\s+(?:to|in|into)\s+(?:a\s+)?(?:file\s+)?"
    rf"{FILE_NAME}",
    re.I | re.S,
)
READ_FILE = re.compile(
    rf"\b(?:read|show|open|cat|print|what(?:'s| is) in)\s+(?:me\s+)?(?:the\s+)?(?:file\s+)?"
    rf"{FILE_NAME}",
    re.I,
)
COUNT_IN_FILE = re.compile(
    rf"\b(?:how many (?:lines|words)|count (?:the )?(?:lines|words))\b.*?\b(?:in|of)\s+"
    rf"(?:the\s+)?(?:file\s+)?{FILE_NAME}",
    re.I | re.S,
)
LIST_FILES = re.compile(r"\b(?:list|show)\b.*\bfiles\b|\bwhat files\b", re.I)
ASKS_ABOUT_EARLIER = re.compile(r"\b(?:before|earlier|previously|last time)\b", re.I)
REMEMBER = re.compile(r"^\s*remember (?:that )?(.+)", re.I | re.S)
SAVE_THAT = re.compile(
    rf"\b(?:save|write|store|put)\s+(?:that|it|this|the (?:answer|result))\s+"
    rf"(?:to|in|into)\s+(?:a\s+)?(?:file\s+)?{FILE_NAME}",
    re.I,
)
# The value an earlier answer gave: "17 * 23 = 391", "The sum of 1..100 is 5050."
RESULT = re.compile(r"(?:=|\bis)\s+(\S+?)[.;,]?(?:\s|$)")
QUESTION_WORD = re.compile(r"[a-z0-9']{3,}")
# Words a question shares with any memory, which say nothing of what it asks about.
NOT_CONTENT = frozenset(
    {
        "what",
        "which",
        "who",
        "whom",
        "where",
        "when",
        "how",
        "why",
        "are",
        "was",
        "were",
        "the",
        "this",
        "that",
        "does",
        "did",
        "you",
        "your",
        "know",
        "tell",
        "about",
        "can",
        "could",
        "please",
    }
)
FROM_MEMORY = "From an earlier run: "
FROM_WHAT_YOU_TOLD_ME = "From what you told me: "
SLOW_COUNT = re.compile(r"\bcount slowly to (\d+)", re.I)
SEARCH = re.compile(
    r"(?:search(?: the web)?(?: for)?|look up|find (?:information|info) (?:on|about))\s+(.+)",
    re.I | re.S,
)
# An MCP tool by name (<prefix>__<tool>), with JSON arguments: "Use demo__add with {"a": 2}".
NAMED_TOOL = re.compile(
    r"\buse (?:the tool )?([A-Za-z][A-Za-z0-9-]*__[A-Za-z0-9_.-]+)(?: with (\{.*\}))?", re.I | re.S
)

TASK_SHAPES = """\
- arithmetic: "What is 17 * 23?", "Compute (2 + 3) ** 4", "Sum of 1..100", "Add 3, 4 and 5"
- the demo: "Compute the sum of 1..100 and save it to a file" (optionally "to total.txt")
- saving text: "Save 'buy milk' to notes.txt"
- reading a file: "Read notes.txt", "What's in notes.txt?"
- counting a file's lines and words: "How many lines are in data.csv?", "How many words are in
  notes.txt?"
- listing files: "List my files"
- web search: "Search the web for pgvector HNSW"
- a task that keeps failing: "Keep reading missing.txt until it exists"
- a long run, one step a second: "Count slowly to 5"
- an MCP server's tool: "Use demo__add with {"a": 2, "b": 3}"
- remembering a fact: "Remember that my staging server is staging.example.com"
- asking about earlier work: "What was the sum of 1..100 that I computed before?" (answered from
  the memories recalled for the run)
- following up in a conversation: "What is 17 * 23?" then "Save that to result.txt"
- any question a recalled memory answers: "Remember that my favourite colour is teal", then, in
  any conversation, "What is my favourite colour?\""""

# A shape's line wrapped for the source, joined again for a person (the chat keeps line breaks).
WRAPPED = "\n  "


@dataclass(frozen=True)
class Observation:
    """One tool call from the history, with its result: `text` as the model read it (a failure
    marked by its status), which is what the mock quotes."""

    tool: str
    arguments: dict[str, Any]
    text: str

    @property
    def status(self) -> ToolStatus:
        return parse_tool_message(self.text)[0]

    @property
    def expired(self) -> bool:
        """It waited for its person's decision, and nobody decided in time: it never ran."""
        return parse_tool_message(self.text) == (ToolStatus.SKIPPED, EXPIRED_TEXT)

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    @property
    def said(self) -> str:
        """What the result says, as an answer quotes it: an MCP tool's answer without the
        envelope that marks it as the server's text."""
        said = said_in(self.text)
        return self.text if said is None else said

    @property
    def reason(self) -> str:
        """Why it failed, in one line (a snippet's exception, not its whole report)."""
        return failure_reason(*parse_tool_message(self.text))

    @property
    def declined(self) -> str | None:
        """Its person (or an operator) declined it, in words: None when nobody did."""
        status, text = parse_tool_message(self.text)
        denial = denial_in(text) if status is ToolStatus.DENIED else None
        if denial is None:
            return None
        who = "An operator of this site declined" if denial.operator else "You declined"
        return f"{who} the call to {self.tool}" + (f": {denial.reason}" if denial.reason else "")

    @property
    def interrupted(self) -> bool:
        """Its worker stopped in the middle of it (the run was resumed): it may or may not have
        completed."""
        return self.status is ToolStatus.INTERRUPTED

    @property
    def stdout(self) -> str:
        """run_code's standard output, as its report shows it."""
        report = parse_report(self.text)
        return report.stdout.strip() if report is not None else self.text.strip()


@dataclass(frozen=True)
class Help:
    """The answer to a task the mock cannot work: what it can do. Its reply is marked as help, so
    whoever keeps a run's outcome knows it answers nothing without reading its words."""

    text: str


Move = tuple[str, dict[str, Any]] | str | Help  # a tool call to make, the answer, or the help
Plan = Callable[[re.Match[str], list[Observation]], Move]


Deltas = Callable[[str], None]
STREAM_PIECE = re.compile(r"\S+\s*|\s+")


class MockLLM:
    """`deltas`, if given, hears the answer in small pieces before the reply is returned, as a
    streaming model's client would, so streaming can be seen and tested without a provider.

    `latency` is how many seconds each turn takes, as a real model's would (load tests and demos
    without a network: LOOP_MOCK_LATENCY_MS). The wait ends early when `interrupt` (set by the
    run's owner, like `deltas`) is set, raising Interrupted; a turn longer than the time the run
    has left times out as a provider's would.
    """

    provider = "mock"
    model = "mock"

    def __init__(self, deltas: Deltas | None = None, *, latency: float = 0.0) -> None:
        self.deltas = deltas
        self.latency = latency

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        self.think(timeout, interrupt)
        at = task_index(messages)
        task = messages[at]["content"]
        seen = observations(messages[at:])
        settled = [observation for observation in seen if not observation.interrupted]
        if tools is None:
            move: Move = summary(seen, messages[-1]["content"])
        elif seen and seen[-1].interrupted:  # whether it completed is unknown: ask for it again
            move = seen[-1].tool, seen[-1].arguments
        elif ASKS_ABOUT_EARLIER.search(task):
            move = from_memory(recalled(messages))
        elif (match := SAVE_THAT.search(task)) and (earlier := earlier_answers(messages[:at])):
            move = save_that(match, earlier[-1], settled)
        else:
            move = next_move(task, settled, recalled(messages))
        said = move.text if isinstance(move, Help) else move
        if isinstance(said, str) and self.deltas is not None:
            for piece in STREAM_PIECE.findall(said):
                self.deltas(piece)
        return reply(move, len(seen) + 1, count_prompt_tokens(messages, tools))

    def think(self, timeout: float | None, interrupt: Interrupt | None = None) -> None:
        """The turn's latency, cut short by an interrupt or by the time the run has left."""
        wait = self.latency if timeout is None else min(self.latency, max(timeout, 0.0))
        if wait > 0:
            if interrupt is None:
                time.sleep(wait)
            elif interrupt.wait(wait):
                interrupt.raise_if_set()
        if wait < self.latency:
            raise ModelTimedOut(
                f"The mock model takes {self.latency:g} seconds a turn; the run had {wait:g} left."
            )


def task_index(messages: list[Message]) -> int:
    """Where the task is: the last message from the user (earlier ones are the conversation's
    earlier turns; Loop's own notes are not the user's) that starts a turn. One that follows a
    tool's result or the task itself is what the person sent the run while it worked: the mock
    reads it and goes on with its task."""
    return max(
        index
        for index, message in enumerate(messages)
        if message["role"] == "user"
        and not is_loop_note(message["content"])
        and (index == 0 or messages[index - 1]["role"] not in ("tool", "user"))
    )


def earlier_answers(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]


def save_that(match: re.Match[str], answer: str, seen: list[Observation]) -> Move:
    """A follow-up: save the value the previous answer gave."""
    path = match.group(1)
    found = RESULT.search(answer)
    value = found.group(1) if found else answer
    if not seen:
        return "write_file", {"path": path, "content": value + "\n"}
    if not seen[-1].ok:
        return f"Saving {value} to {path} failed: {seen[-1].text}"
    return f"I saved {value} to {path}."


def answered_by_memory(question: str, memories: list[str]) -> str:
    """What a recalled memory says in answer, if one matches strongly: every content word of the
    question is in it. A run's outcome answers through its answer, not its task."""
    words = set(QUESTION_WORD.findall(question.lower())) - NOT_CONTENT - {"my", "i"}
    if not words:
        return ""
    for memory in memories:
        said, answered = what_it_says(memory)
        if words <= set(QUESTION_WORD.findall(said.lower())):
            if answered:
                return FROM_MEMORY + said.removeprefix(FROM_MEMORY).removeprefix(
                    FROM_WHAT_YOU_TOLD_ME
                )
            return FROM_WHAT_YOU_TOLD_ME + re.sub(r"\bmy\b", "your", said, flags=re.I)
    return ""


def what_it_says(memory: str) -> tuple[str, bool]:
    """What a recalled memory says, and whether an earlier run's answer says it: the first line
    of that answer (the rest is detail: steps, a file's content), or else the memory itself, on
    one line as the prompt showed it."""
    answer = outcome_answer(memory)
    if answer is None:
        return memory_line(memory), False
    return next(iter(answer.splitlines()), ""), True


def observations(messages: list[Message]) -> list[Observation]:
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    return [
        Observation(
            call["function"]["name"],
            _arguments(call["function"]["arguments"]),
            results.get(call["id"], ""),
        )
        for message in messages
        for call in message.get("tool_calls") or ()
    ]


def _arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def recalled(messages: list[Message]) -> list[str]:
    """The memories Loop put in the system prompt for this run, most relevant first."""
    return memories_in(messages[0]["content"]) if messages[0]["role"] == "system" else []


def from_memory(memories: list[str]) -> str:
    if not memories:
        return "I have no memory of an earlier run about that."
    said, _ = what_it_says(memories[0])
    # An earlier answer may itself have come from memory: do not repeat its preamble.
    return FROM_MEMORY + said.removeprefix(FROM_MEMORY)


def reply(move: Move, call_number: int, prompt_tokens: int) -> Reply:
    if isinstance(move, Help):
        usage = Usage(prompt_tokens, count_tokens(move.text))
        return Reply(text=move.text, usage=usage, help=True)
    if isinstance(move, str):
        return Reply(text=move, usage=Usage(prompt_tokens, count_tokens(move)))
    name, arguments = move
    raw = json.dumps(arguments)
    call = ToolCall(f"call_{call_number}", name, raw)
    return Reply(tool_calls=(call,), usage=Usage(prompt_tokens, count_tokens(name + raw)))


def next_move(task: str, seen: list[Observation], memories: list[str]) -> Move:
    # A call that waited for a decision nobody made never ran: asked for again, as a model would
    # once the person continues the run.
    seen = [observation for observation in seen if not observation.expired]
    if seen and (declined := seen[-1].declined) is not None:
        return f"{declined}, so I stopped there. Tell me if you want the task done another way."
    for pattern, plan in PLANS:
        match = pattern.search(task)
        if match:
            return plan(match, seen)
    if answer := answered_by_memory(task, memories):
        return answer
    return Help(
        "This site runs a demo model, which can only do a few kinds of task, and this is not "
        f"one of them. Put your task like one of these:\n{TASK_SHAPES.replace(WRAPPED, ' ')}"
    )


def save_sum(match: re.Match[str], seen: list[Observation]) -> Move:
    """The demo: compute, check the file, recover from its absence by writing it, answer."""
    first, last = int(match.group(1)), int(match.group(2))
    named = NAMED_FILE.search(match.string)
    path = named.group(1) if named else "sum.txt"
    if not seen:
        return "run_code", {"code": f"print(sum(range({first}, {last} + 1)))"}
    computed = seen[0]
    if not computed.ok:
        return f"I could not compute the sum: {computed.text}"
    total = computed.stdout
    if len(seen) == 1:
        return "read_file", {"path": path}
    latest = seen[-1]
    if latest.tool == "read_file" and latest.ok and latest.text.strip() == total:
        return f"The sum of {first}..{last} is {total}; {path} already holds it."
    if latest.tool == "read_file":
        return "write_file", {"path": path, "content": total + "\n"}
    if not latest.ok:
        return f"The sum of {first}..{last} is {total}, but saving it failed: {latest.text}"
    return f"The sum of {first}..{last} is {total}. I saved it to {path}."


def count_slowly(match: re.Match[str], seen: list[Observation]) -> Move:
    """One run_code step a second, each printing the next number: a run long enough to watch."""
    last = int(match.group(1))
    counted = sum(observation.ok for observation in seen)
    # A step a Stop killed is counted again once the run goes on (a Continue).
    if seen and not seen[-1].ok and not seen[-1].text.removeprefix("ERROR: ").startswith(STOPPED):
        return f"Counting stopped at {counted}: {seen[-1].text}"
    if counted >= last:
        return f"I counted to {last}, one step a second."
    return "run_code", {"code": f"import time\ntime.sleep(1)\nprint({counted + 1})"}


def keep_reading(match: re.Match[str], seen: list[Observation]) -> Move:
    """Retries a missing file under another spelling each time, as models do."""
    path = match.group(1)
    if seen and seen[-1].ok:
        return f"{path} exists now. It says:\n{seen[-1].text}"
    return "read_file", {"path": "./" * len(seen) + path}


def count_in_file(match: re.Match[str], seen: list[Observation]) -> Move:
    """Reads the file, then counts its lines (a last line without a newline counts too) and its
    words: something real to do with a file a person uploaded."""
    path = match.group(1)
    if not seen:
        return "read_file", {"path": path}
    result = seen[-1]
    if not result.ok:
        return f"I could not read {path}: {result.text}"
    text = parse_tool_message(result.text)[1]
    if is_empty_file_note(text):
        text = ""
    lines, words = len(text.splitlines()), len(text.split())
    return f"{path} has {counted(lines, 'line')} and {counted(words, 'word')}."


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def compute(code: str, shown: str) -> Plan:
    def plan(match: re.Match[str], seen: list[Observation]) -> Move:
        if not seen:
            return "run_code", {"code": code}
        result = seen[-1]
        if not result.ok:
            return f"I could not compute {shown}: {result.reason}"
        return f"{shown} = {result.stdout}"

    return plan


def range_sum(match: re.Match[str], seen: list[Observation]) -> Move:
    first, last = int(match.group(1)), int(match.group(2))
    code = f"print(sum(range({first}, {last} + 1)))"
    return compute(code, f"The sum of {first}..{last}")(match, seen)


def listed_sum(match: re.Match[str], seen: list[Observation]) -> Move:
    numbers = re.findall(r"\d+", match.group(1))
    shown = " + ".join(numbers)
    return compute(f"print({shown})", shown)(match, seen)


def expression(match: re.Match[str], seen: list[Observation]) -> Move:
    shown = " ".join(match.group(0).split())
    return compute(f"print({shown.replace('^', '**')})", shown)(match, seen)


def one_call(tool: str, arguments: Callable[[re.Match[str]], dict[str, Any]]) -> Plan:
    """A task done by one tool call, answered with its result."""

    def plan(match: re.Match[str], seen: list[Observation]) -> Move:
        if not seen:
            return tool, arguments(match)
        result = seen[-1]
        if not result.ok:
            return f"{tool} failed: {result.said}"
        return result.said

    return plan


def summary(seen: list[Observation], request: str) -> str:
    """The last turn of a halted run: why it stops, and what was done, in words (what worked,
    what failed and why), as a model would put it: no tool's output is quoted."""
    reason = summary_detail(request)
    lines = [f"I had to stop: {reason if reason is not None else 'the run was halted.'}"]
    outcomes = [
        Outcome(observation.tool, *parse_tool_message(observation.text)) for observation in seen
    ]
    said = lines[0]
    # A failure the reason already quotes (the breaker's) is not told twice.
    told = [line for line in progress_in_words(outcomes) if line.split(" — ")[-1] not in said]
    return "\n\n".join([*lines, *told])


def named_tool_arguments(match: re.Match[str]) -> dict[str, Any]:
    try:
        arguments = json.loads(match.group(2) or "{}")
    except json.JSONDecodeError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


PLANS: list[tuple[re.Pattern[str], Plan]] = [
    (NAMED_TOOL, lambda m, seen: one_call(m.group(1), named_tool_arguments)(m, seen)),
    (REMEMBER, one_call("remember", lambda m: {"fact": m.group(1).strip()})),
    (KEEP_READING, keep_reading),
    (SLOW_COUNT, count_slowly),
    (SAVE_SUM, save_sum),
    (SEARCH, one_call("web_search", lambda m: {"query": m.group(1).strip(" .?!")})),
    (WRITE_TEXT, one_call("write_file", lambda m: {"path": m.group(2), "content": m.group(1)})),
    (COUNT_IN_FILE, count_in_file),
    (READ_FILE, one_call("read_file", lambda m: {"path": m.group(1)})),
    (LIST_FILES, one_call("list_files", lambda m: {})),
    (RANGE_SUM, range_sum),
    (LISTED_SUM, listed_sum),
    (EXPRESSION, expression),
]
