"""Markdown and code as sanitised HTML: the one renderer of the chat's answers and of the Files
panel's previews, so a table or a code block looks the same in both.

It lives in workspace, the lower of the two layers that draw with it (the chat imports it, the
Files panel could not import the chat). Code is highlighted by Pygments on the server, into
spans with Pygments' short class names (styled in static/loop/loop.css): no inline style, so the
site's CSP holds, and no front-end build.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

# Past this, a file's preview is plain text: some lexers slow down on a large file, and a person
# reading 200 KB of code wants it legible, not coloured.
HIGHLIGHT_MAX_CHARS = 100_000
CODE_BLOCK_CLASS = "highlight"
# Raw HTML in Markdown is shown as text; nh3 then keeps only these tags and link schemes, so a
# <script>, an onerror= or a javascript: link in model output can never run.
ALLOWED_TAGS = {
    "p", "br", "strong", "em", "code", "pre", "blockquote", "ul", "ol", "li", "a", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "del", "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
# The only classes that survive: Pygments' token classes on spans and the code block's own, so
# model output cannot borrow the page's classes (a fake card, a hidden text).
ALLOWED_CLASSES = {
    "span": {name for name in STANDARD_TYPES.values() if name},
    "pre": {CODE_BLOCK_CLASS},
}
_FORMATTER = HtmlFormatter(nowrap=True)


def _fence(code: str, language: str, _attributes: str) -> str:
    """A fenced block, highlighted for its language (plain for none or an unknown one)."""
    return code_block(code, _lexer_named(language))


def _lexer_named(language: str) -> Lexer:
    if not language:
        return TextLexer()
    try:
        lexer: Lexer = get_lexer_by_name(language)
    except ClassNotFound:
        return TextLexer()
    return lexer


def code_block(code: str, lexer: Lexer) -> str:
    """Code as a highlighted block (Pygments escapes every character of it)."""
    if len(code) > HIGHLIGHT_MAX_CHARS:
        lexer = TextLexer()
    return (
        f'<pre class="{CODE_BLOCK_CLASS}"><code>{highlight(code, lexer, _FORMATTER)}</code></pre>'
    )


# breaks: a single newline is kept as a line break, as a person (and a model echoing a file) means.
_markdown = MarkdownIt("commonmark", {"html": False, "breaks": True, "highlight": _fence}).enable(
    "table"
)


def sanitised(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        allowed_classes=ALLOWED_CLASSES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def markdown(text: str) -> str:
    """Markdown as HTML a page can show: tables, line breaks kept, fenced code highlighted."""
    tokens = _markdown.parse(text)
    for token in tokens:
        _aligned(token)
    return sanitised(_markdown.renderer.render(tokens, _markdown.options, {}))


def _aligned(token: Token) -> None:
    """A table cell's alignment as `align`, not as the inline style markdown-it writes, which
    the site's CSP would refuse (and nh3 drops)."""
    style = token.attrGet("style")
    if token.type in ("th_open", "td_open") and isinstance(style, str):
        token.attrs.pop("style")
        token.attrSet("align", style.removeprefix("text-align:"))


def lexer_for(name: str) -> Lexer | None:
    """The language a file's name says it is in ("Makefile", "page.HTML"), None for plain text."""
    for spelling in (name, name.lower()):
        try:
            lexer = get_lexer_for_filename(spelling, stripnl=False)
        except ClassNotFound:
            continue
        return None if isinstance(lexer, TextLexer) else lexer
    return None


def highlighted_file(text: str, name: str) -> str:
    """A file's text, highlighted by what its name says it is (plain text if nothing)."""
    return sanitised(code_block(text, lexer_for(name) or TextLexer(stripnl=False)))
