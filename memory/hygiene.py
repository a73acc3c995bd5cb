"""What is worth remembering: an outcome that carries nothing would only crowd out useful memories.

A model's help or refusal text ("I can only work a few task shapes", "I could not compute ...")
and a run that stopped with nothing done are recalled just as readily as a real result, and
answer nothing. One named rule decides, so it can be tested and changed in one place. It reads
what the run says of itself (whose answer it is: the model's, its help as its reply marked it, or
Loop's own account; how many tool calls worked), never the wording of Loop's account or of the
mock's help. Only a real model's refusal, which nothing marks, is known by how it opens.

Beyond that, an outcome is stored only when the run did something a later run could neither
redo nor find elsewhere (`worth_an_outcome`): it wrote a file, or brought findings in from the
web. Arithmetic, counting, reading or listing files are done again in a moment; an answer made
from what the model already had (its knowledge, the conversation, the recalled memories) is a
copy of what is already there, and a copy outlives the forgetting of what it copies. A run that
called `remember` stored its fact already: its outcome would be the same fact twice.

The memory a run leaves is written by `outcome_text` and its answer read back only by
`outcome_answer`.
"""

import json
import re
from collections.abc import Collection, Iterable

from core.events import AnswerSource
from core.text import excerpt

# How refusal and failure texts open, whichever model wrote them.
_NOTHING_OPENINGS = re.compile(
    r"^(i can only|i could not|i couldn'?t|"
    r"i can'?t|i cannot|i'?m sorry|i am sorry|sorry\b|i don'?t know|i do not know|"
    r"i'?m unable|i am unable|i'?m not able|i am not able|as an ai\b|"
    r"i have no (memory|record)|i don'?t have (any )?(memory|record|access))"
)


def carries_nothing(
    answer: str, *, source: AnswerSource | None = AnswerSource.MODEL, ok_tool_calls: int = 0
) -> bool:
    """True for an answer not worth a memory: empty, the model's help (`source` HELP: its reply
    said so), a model's refusal text, or Loop's own account of a run (`source` PROGRESS: the
    model gave no answer) in which no tool call succeeded (`ok_tool_calls`)."""
    text = " ".join(answer.split()).casefold().replace("\u2019", "'")
    if not text or source is AnswerSource.HELP:
        return True
    if source is AnswerSource.PROGRESS:
        return ok_tool_calls == 0
    return _NOTHING_OPENINGS.match(text) is not None


# The tools whose work a later run can neither redo nor find elsewhere: a file written (people
# ask about "the file I saved earlier"), what a web search found. By name, as runs record them.
LEAVES_SOMETHING = frozenset({"write_file", "web_search"})
# The tool that stores a fact on purpose: a run that used it has its memory already.
REMEMBERS = "remember"


def worth_an_outcome(ok_tools: Collection[str]) -> bool:
    """Whether a run whose tool calls of these names worked leaves an outcome worth a memory: it
    wrote a file or searched the web, and stored no fact with `remember`. Everything else
    (computing, counting, reading, listing, answering from the prompt alone) leaves none."""
    used = set(ok_tools)
    return REMEMBERS not in used and bool(used & LEAVES_SOMETHING)


# A run's memory names the files it wrote, with the start of each: "the file I saved earlier" is
# what people ask about later, and an answer rarely repeats what went into the file.
MAX_FILES = 5
FILE_EXCERPT_CHARS = 80


_OUTCOME = re.compile(
    r"Task: .*?\nOutcome: [^\n]*\nAnswer: (?P<answer>.*?)(?:\nFiles written: [^\n]*)?", re.S
)


def outcome_text(task: str, outcome: str, answer: str, files: list[str]) -> str:
    """The memory a run leaves: what was asked, how it ended (one line), the answer, the files
    written; `outcome_answer` reads its answer back."""
    text = f"Task: {task}\nOutcome: {outcome}\nAnswer: {answer}"
    return text + (f"\nFiles written: {'; '.join(files)}" if files else "")


def outcome_answer(memory: str) -> str | None:
    """The answer of a memory `outcome_text` wrote; None for any other memory (a fact the user
    asked to remember)."""
    found = _OUTCOME.fullmatch(memory)
    return None if found is None else found["answer"]


def files_written(write_arguments: Iterable[str]) -> list[str]:
    """`path (start of content)` for each successful write_file call's JSON arguments."""
    files: list[str] = []
    for arguments in write_arguments:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            continue
        path, content = parsed.get("path"), parsed.get("content")
        if isinstance(path, str) and isinstance(content, str) and len(files) < MAX_FILES:
            files.append(f"{path} ({excerpt(content, FILE_EXCERPT_CHARS)})")
    return files
