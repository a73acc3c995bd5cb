"""A reply still being written, drawn by the one renderer (workspace/markup.py) as its answer will
be: its Markdown so far, with what the rest of the reply would turn into structure held back or
closed, so the streamed card never shows a marker (`**`, `# `, `1.`, a backtick) as text; and
where its settled part ends (no later text changes it), so each piece redraws only what follows.
"""

import re

from workspace.markup import markdown

# A line that is nothing yet but the start of a block: a bullet, a number, a heading's hashes, a
# quote, a fence or rule being typed. Shown as text it would flash the marker, and under a
# paragraph some ("-", "=") would make that paragraph a heading for a moment.
BLOCK_START = re.compile(r"[ \t]*(?:[-*+=_]+|\d{1,9}[.)]?|#{1,6}|>|`{1,3}|~{1,3})[ \t]*")
FENCE = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")
FENCE_START = re.compile(r"[ \t]{0,3}[`~]+")
TABLE_ROW = re.compile(r"[ \t]*\|")
# A link or image still being written: its text, then maybe the start of its address.
OPEN_LINK = re.compile(r"!?\[([^\]\n]*)(?:\](?:\([^)\n]*)?)?$")
EMPHASIS_RUN = re.compile(r"\*+|_+")
CODE_RUN = re.compile(r"`+")
CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)
# What a line after a blank line may start with and still belong to the block before it: a list
# item or its indented text, a quote (or a digit, which may be a list's number).
GOES_ON = frozenset(" \t-*+>0123456789")


def markdown_so_far(text: str) -> str:
    """The HTML of a reply's first `text`, as its answer will draw it once it is whole."""
    return markdown(closed(text))


def closed(text: str) -> str:
    """Markdown cut off anywhere, made whole: the last line's bare block marker and a table's
    rows before its delimiter row held back; inline code, emphasis and a link closed."""
    lines = text.split("\n")
    if in_fence(text):  # code however cut, but for a closing fence being written
        return "\n".join(lines[:-1]) if FENCE_START.fullmatch(lines[-1]) else text
    if BLOCK_START.fullmatch(lines[-1]):
        lines[-1] = ""
    lines = without_unformed_table(lines)
    head, _, last = "\n".join(lines).rpartition("\n\n")
    return f"{head}\n\n{closed_inline(last)}" if head else closed_inline(last)


def settled_end(text: str, start: int = 0) -> int:
    """Where the part of `text` that no later text can change ends, looked for from `start`
    (such a place itself): the start of the last line, outside code, that follows a blank line
    and can only begin a block of its own. The Markdown before it draws the same, whatever
    follows."""
    end, offset, fence, after_blank = start, start, "", False
    for line in text[start:].split("\n"):
        if after_blank and not fence and line and line[0] not in GOES_ON:
            end = offset
        fence = fence_after(fence, line)
        after_blank = not line.strip()
        offset += len(line) + 1
    return end


def in_fence(text: str) -> bool:
    """Whether the text ends inside a fenced code block, which draws as code however cut."""
    fence = ""
    for line in text.split("\n"):
        fence = fence_after(fence, line)
    return bool(fence)


def fence_after(fence: str, line: str) -> str:
    """The code fence open after `line`, given the one open before it ("" for none)."""
    opening = FENCE.match(line)
    if opening is None:
        return fence
    marker = opening.group(1)
    if not fence:
        return marker
    closes = marker[0] == fence[0] and len(marker) >= len(fence)
    return "" if closes and not line[opening.end() :].strip() else fence


def without_unformed_table(lines: list[str]) -> list[str]:
    """The lines without the trailing rows of a table not formed yet (its delimiter row not
    whole): until then they are a paragraph of pipes."""
    end = len(lines) - 1 if lines[-1] == "" else len(lines)
    start = end
    while start > 0 and TABLE_ROW.match(lines[start - 1]):
        start -= 1
    if start == end or "<table>" in markdown("\n".join(lines[start:end])):
        return lines
    return lines[:start]


def closed_inline(paragraph: str) -> str:
    """The last paragraph with its open link, code span and emphasis closed."""
    paragraph = OPEN_LINK.sub(lambda link: link.group(1), paragraph.rstrip())
    if open_code := unmatched_code(CODE_RUN.findall(paragraph)):
        if paragraph.endswith(open_code):
            return closed_inline(paragraph[: -len(open_code)])
        return paragraph + open_code
    kept, closers = emphasis_closed(outside_code(paragraph))
    return paragraph[:kept].rstrip() + closers


def unmatched_code(runs: list[str]) -> str:
    """The backtick run that opened a code span not yet closed, or ""."""
    opened = ""
    for run in runs:
        if not opened:
            opened = run
        elif run == opened:
            opened = ""
    return opened


def outside_code(paragraph: str) -> str:
    """The paragraph with its (closed) code spans blanked: emphasis markers in code are text."""
    return CODE_SPAN.sub(lambda span: " " * len(span.group(0)), paragraph)


def emphasis_closed(paragraph: str) -> tuple[int, str]:
    """How much of the paragraph to keep, and the markers that close the emphasis it leaves
    open, innermost first. A run with space on both sides (17 * 23) or inside a word
    (snake_case) is text; a run that ends the paragraph without closing what is open exactly
    is a marker still being written, held back."""
    opened: list[str] = []
    for match in EMPHASIS_RUN.finditer(paragraph):
        run, start, end = match.group(0), match.start(), match.end()
        before = paragraph[start - 1] if start else " "
        after = paragraph[end] if end < len(paragraph) else ""
        if run[0] == "_" and before.isalnum() and after.isalnum():
            continue
        if not before.isspace() and opened and opened[-1] == run:
            opened.pop()
        elif not after:
            return start, "".join(reversed(opened))
        elif not after.isspace():
            opened.append(run)
    return len(paragraph), "".join(reversed(opened))
