"""The one Markdown renderer of answers and previews (workspace/markup.py): tables, single line
breaks kept, fenced code highlighted into class-only spans, and nothing that could run or borrow
the page's looks surviving."""

import re

import pytest

from chat.rendering import markdown as chat_markdown
from tests.test_chat_views import ActiveParts
from workspace.markup import ALLOWED_CLASSES, HIGHLIGHT_MAX_CHARS, highlighted_file, markdown

pytestmark = pytest.mark.fast

TABLE = "| a | b | a\\*b |\n|---|--:|---|\n| 6 | 7 | 42 |\n"


def test_a_table_is_a_table_with_a_header_and_its_alignment():
    html = markdown(TABLE)
    assert "<table>" in html
    assert re.findall(r"<th[^>]*>([^<]*)</th>", html) == ["a", "b", "a*b"]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", html) == ["6", "7", "42"]
    assert '<td align="right">7</td>' in html


def test_single_line_breaks_are_kept():
    html = markdown("line one\nline two\nline three")
    assert html == "<p>line one<br>\nline two<br>\nline three</p>\n"


def test_a_fenced_block_is_highlighted_for_its_language():
    html = markdown('```python\ndef total(x):\n    return x + "<b>"\n```')
    assert html.startswith('<pre class="highlight"><code>')
    assert '<span class="k">def</span>' in html
    assert '<span class="nf">total</span>' in html
    assert "&lt;b&gt;" in html  # the code's own markup is text
    assert "<b>" not in html


@pytest.mark.parametrize(
    "fence", ["```\nplain <i>x</i>\n```", "```nosuchlanguage\nplain <i>x</i>\n```"]
)
def test_a_fence_of_no_or_an_unknown_language_is_plain_escaped_code(fence):
    html = markdown(fence)
    assert html == '<pre class="highlight"><code>plain &lt;i&gt;x&lt;/i&gt;\n</code></pre>\n'


@pytest.mark.parametrize(
    "attack",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[x](javascript:alert(1))",
        "```html\n<script>alert(1)</script>\n```",
        '<span class="card answer">fake</span>',
        "<style>body{display:none}</style>",
    ],
)
def test_nothing_in_markdown_can_run_or_restyle_the_page(attack):
    html = markdown(attack)
    assert ActiveParts(html).found == []
    assert "<script" not in html
    assert "<style" not in html
    assert "<img" not in html
    assert not re.search(r'<[^>]*class="card', html)


def test_only_pygments_classes_survive_on_spans():
    """A class the sanitiser lets through is a token's or the code block's, never the page's."""
    html = markdown("```python\nx = 1\n```")
    spans = set(re.findall(r'<span class="([^"]+)"', html))
    assert spans
    assert spans <= ALLOWED_CLASSES["span"]
    assert "card" not in ALLOWED_CLASSES["span"]


def test_the_chat_draws_answers_with_the_same_renderer():
    text = TABLE + "\n```python\nx = 1\n```"
    assert chat_markdown(text) == markdown(text)


def test_a_file_is_highlighted_by_its_name_and_html_stays_source():
    assert '<span class="kn">import</span>' in highlighted_file("import os\n", "tool.py")
    page = highlighted_file("<script>alert(1)</script>\n", "page.html")
    assert "<script" not in page
    assert '<span class="nt">script</span>' in page
    assert highlighted_file("just words\n", "notes.unknownkind").count("<span") == 0


def test_a_very_large_file_is_shown_plain_not_highlighted():
    code = "x = 1\n" * (HIGHLIGHT_MAX_CHARS // 6 + 1)
    html = highlighted_file(code, "big.py")
    assert "<span" not in html
    assert html.count("x = 1") == code.count("x = 1")
