"""A reply drawn while it is written (chat/streamed.py): cut after any character, it shows no
Markdown marker as text, and its blocks are always the first blocks of its whole answer, so
nothing changes shape when the answer takes its place."""

import html
import re

import pytest

from chat.streamed import markdown_so_far, settled_end
from workspace.markup import markdown

pytestmark = pytest.mark.fast

ANSWER = """# Plan

Here is **the plan**, in *three* steps:

1. Read `sum.txt` with read_file
2. Add **one** to the _number_ in it
3. Save it to [the file](https://example.com/sum)

| step | tool |
|---|---|
| read | `read_file` |

- then a bullet
- and another, with **bold *and italic***

```python
print(17 * 23)
```

So 17 * 23 = 391, and snake_case_names stay as they are.
"""
# What shows as text only when Markdown failed to become structure.
MARKERS = re.compile(r"\*\*|`|(?<!\w)_\w|\[|\]\(|^\s*(?:#|\d+[.)]|[-+|>=])", re.MULTILINE)
BLOCKS = re.compile(r"<(h\d|p|ol|ul|li|table|thead|tbody|tr|th|td|pre|blockquote|hr)\b")


def shown_text(drawn: str) -> str:
    """The text a person reads, code blocks aside (code shows its own characters)."""
    drawn = re.sub(r"<pre.*?</pre>", "", drawn, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", drawn))


def prefixes(text: str) -> list[str]:
    return [text[:end] for end in range(1, len(text) + 1)]


# Blocks that go on after a blank line (a loose list, a quote, code with blank lines in it): none
# is cut where it settles.
LOOSE = """Intro

1. first

2. second
   still the second

> quoted

> still quoted

```
code

more code
```

    indented code

    more of it

Done.
"""


def test_the_whole_answer_draws_as_the_answer_does():
    assert markdown_so_far(ANSWER) == markdown(ANSWER)


def test_no_prefix_shows_a_markdown_marker_as_text():
    assert not MARKERS.search(shown_text(markdown(ANSWER)))  # the test's own premise
    shown = {prefix: shown_text(markdown_so_far(prefix)) for prefix in prefixes(ANSWER)}
    assert {prefix[-12:]: text for prefix, text in shown.items() if MARKERS.search(text)} == {}


def test_every_prefix_draws_the_first_blocks_of_the_answer():
    whole = BLOCKS.findall(markdown(ANSWER))
    for prefix in prefixes(ANSWER):
        blocks = BLOCKS.findall(markdown_so_far(prefix))
        assert blocks == whole[: len(blocks)], prefix[-20:]


@pytest.mark.parametrize(
    ("written", "drawn"),
    [
        ("Here is **the pl", "<p>Here is <strong>the pl</strong></p>\n"),
        ("Here is **", "<p>Here is</p>\n"),
        ("Read `sum.t", "<p>Read <code>sum.t</code></p>\n"),
        ("Steps:\n1.", "<p>Steps:</p>\n"),
        ("Intro\n-", "<p>Intro</p>\n"),
        ("See [the fi", "<p>See the fi</p>\n"),
        ("17 * 23 = 391", "<p>17 * 23 = 391</p>\n"),
    ],
)
def test_what_is_being_written_is_held_back_or_closed(written, drawn):
    assert markdown_so_far(written) == drawn


def test_a_table_shows_once_its_delimiter_row_is_whole():
    assert markdown_so_far("Sizes\n\n| room | area |") == "<p>Sizes</p>\n"
    assert markdown_so_far("Sizes\n\n| room | area |\n|--") == "<p>Sizes</p>\n"
    assert "<table>" in markdown_so_far("Sizes\n\n| room | area |\n|---|---|\n| kit")


def test_model_output_stays_sanitised_while_it_streams():
    drawn = markdown_so_far("Look: <script>alert(1)</script> **<img src=x onerror=alert(2)>")
    assert "<script" not in drawn
    assert "<img" not in drawn


@pytest.mark.parametrize("answer", [ANSWER, LOOSE])
def test_what_settled_draws_the_same_whatever_follows(answer):
    """Each prefix drawn as the socket draws it, its settled part once and the rest again, is
    the prefix drawn whole; and what settled never unsettles."""
    settled = 0
    for prefix in prefixes(answer):
        end = settled_end(prefix, settled)
        assert end >= settled
        assert markdown(prefix[:end]) + markdown_so_far(prefix[end:]) == markdown_so_far(prefix)
        assert markdown(answer).startswith(markdown(prefix[:end]))  # drawn once and for all
        settled = end
    assert settled > len(answer) // 2  # and most of it settles on the way
