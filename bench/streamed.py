"""What drawing a streamed reply as its answer costs the web process, beside the raw pieces it
drew before (issue 40, item 8): each message a socket hears redraws the reply's text so far
through the answer's renderer (chat/streamed.py), up to the 10,000 characters a card shows.

    .venv/bin/python bench/streamed.py [--chars 20000] [--per-message 50]

A Markdown reply (headings, lists, bold, inline and fenced code, a table) of --chars characters
arrives in messages of --per-message characters (a model writing 1,000 characters a second, its
pieces gathered for 50 ms as agent/bus.py does). It prints the messages drawn, the total and the
longest drawing, and the bytes sent to one page: for the baseline (each piece escaped into a span,
as before); for reference, the whole text so far drawn again with each message; and as the socket
draws it (chat.rendering's streaming_card and streamed_text, as chat/consumers.py calls them: the
settled part drawn once, the rest again, nothing past the cap). Goal: the longest drawing well
under the 50 ms between two messages.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.utils.html import escape  # noqa: E402

from chat.rendering import streamed_text, streaming_card  # noqa: E402
from chat.streamed import markdown_so_far  # noqa: E402
from chat.texts import SHORT_TEXT_CHARS  # noqa: E402

SECTION = """## Step {n}

Here is **what step {n} does**, with *care*:

1. Read `data-{n}.csv` with read_file
2. Sum the column and check it against [the notes](https://example.com/{n})
3. Save the total

| file | rows | total |
|---|--:|--:|
| data-{n}.csv | {n}0 | {n}5 |

```python
total = sum(int(row["count"]) for row in rows)  # step {n}
print(total)
```

"""


def reply(chars: int) -> str:
    text, n = "", 1
    while len(text) < chars:
        text += SECTION.format(n=n)
        n += 1
    return text[:chars]


def pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def as_answer(messages: list[str]) -> tuple[int, float, float, int]:
    """Messages drawn, total and longest seconds, bytes, as chat/consumers.py draws them: the
    card with the text so far, then what settled added and the rest redrawn, to the cap."""
    so_far, settled, drawn, total, longest, sent = "", 0, 0, 0.0, 0.0, 0
    for piece in messages:
        if len(so_far) >= SHORT_TEXT_CHARS:
            break
        so_far = (so_far + piece)[:SHORT_TEXT_CHARS]
        started = time.perf_counter()
        if drawn:
            frame, settled = streamed_text(1, 1, so_far, settled)
        else:
            frame, settled = streaming_card(1, 1, so_far)
        took = time.perf_counter() - started
        drawn, total, longest, sent = drawn + 1, total + took, max(longest, took), sent + len(frame)
    return drawn, total, longest, sent


def as_whole(messages: list[str]) -> tuple[int, float, float, int]:
    """For reference: the whole text so far drawn again with each message, to the cap."""
    so_far, drawn, total, longest, sent = "", 0, 0.0, 0.0, 0
    for piece in messages:
        if len(so_far) >= SHORT_TEXT_CHARS:
            break
        so_far = (so_far + piece)[:SHORT_TEXT_CHARS]
        started = time.perf_counter()
        html = markdown_so_far(so_far)
        took = time.perf_counter() - started
        drawn, total, longest, sent = drawn + 1, total + took, max(longest, took), sent + len(html)
    return drawn, total, longest, sent


def as_pieces(messages: list[str]) -> tuple[int, float, float, int]:
    """The baseline: each piece escaped into a span added to the card's paragraph."""
    total, longest, sent = 0.0, 0.0, 0
    for piece in messages:
        started = time.perf_counter()
        frame = f'<span id="stream-1-1-text" hx-swap-oob="beforeend">{escape(piece)}</span>'
        took = time.perf_counter() - started
        total, longest, sent = total + took, max(longest, took), sent + len(frame)
    return len(messages), total, longest, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--per-message", type=int, default=50)
    options = parser.parse_args()
    messages = pieces(reply(options.chars), options.per_message)
    streamed_text(0, 0, "*warm*", 0)  # the partials compiled once, as a running site has them
    streaming_card(0, 0, "*warm*")
    print(f"a reply of {options.chars:,} characters in {len(messages)} messages")
    print(f"{'':28} {'drawn':>6} {'total ms':>9} {'longest ms':>11} {'kB sent':>8}")
    for name, measure in (
        ("baseline: raw pieces", as_pieces),
        ("whole text redrawn", as_whole),
        ("drawn as its answer", as_answer),
    ):
        drawn, total, longest, sent = measure(messages)
        print(
            f"{name:28} {drawn:>6} {total * 1000:>9.1f} {longest * 1000:>11.2f} {sent / 1000:>8.0f}"
        )


if __name__ == "__main__":
    main()
