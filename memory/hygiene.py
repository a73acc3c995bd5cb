"""What is worth remembering: an outcome that carries nothing would only crowd out useful memories.

A model's help or refusal text ("I can only work a few task shapes", "I could not compute ...")
and a run that stopped with nothing done are recalled just as readily as a real result, and
answer nothing. One named rule decides, so it can be tested and changed in one place.
"""

import json
import re
from collections.abc import Iterable

# How help, refusal and failure texts open, whichever model wrote them.
_NOTHING_OPENINGS = re.compile(
    r"^(i am loop's mock model|i'?m a mock|i am a mock|i can only|i could not|i couldn'?t|"
    r"i can'?t|i cannot|i'?m sorry|i am sorry|sorry\b|i don'?t know|i do not know|"
    r"i'?m unable|i am unable|i'?m not able|i am not able|as an ai\b|"
    r"i have no (memory|record)|i don'?t have (any )?(memory|record|access))"
)
# The loop's account of a run that ended without the model's own answer; a line per call made.
_STOPPED = "stopped before a final answer"
_OK_CALL = re.compile(r"^\d+\. \S+ -> ok:", re.MULTILINE)


def carries_nothing(answer: str) -> bool:
    """True for an answer not worth a memory: empty, help or refusal text, or the account of a
    run that stopped before any tool call succeeded."""
    text = " ".join(answer.split()).casefold().replace("\u2019", "'")
    if not text or _NOTHING_OPENINGS.match(text):
        return True
    return text.startswith(_STOPPED) and not _OK_CALL.search(answer)


# A run's memory names the files it wrote, with the start of each: "the file I saved earlier" is
# what people ask about later, and an answer rarely repeats what went into the file.
MAX_FILES = 5
FILE_EXCERPT_CHARS = 80


def outcome_text(task: str, outcome: str, answer: str, files: list[str]) -> str:
    """The memory a run leaves: what was asked, how it ended, the answer, the files written."""
    text = f"Task: {task}\nOutcome: {outcome}\nAnswer: {answer}"
    return text + (f"\nFiles written: {'; '.join(files)}" if files else "")


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
            flat = " ".join(content.split())
            cut = flat[:FILE_EXCERPT_CHARS] + ("…" if len(flat) > FILE_EXCERPT_CHARS else "")
            files.append(f"{path} ({cut})")
    return files
