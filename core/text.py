"""Text helpers every layer shares (core is the bottom one)."""

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

ELLIPSIS = "…"
# What stands for a character PostgreSQL cannot store.
REPLACEMENT = "\ufffd"
# NUL, which no text or jsonb value may hold; a surrogate, which alone is not UTF-8 (a Python
# string holds a character beyond the BMP as one code point, never as a pair).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

Value = TypeVar("Value")


def storable(value: Value) -> Value:
    """Text from outside Loop (a model's reply, a tool's output, an MCP server's answer or
    listing), or a value holding it, as PostgreSQL can store it: each NUL and lone surrogate
    replaced by U+FFFD, in keys too. The very value when nothing needs it, so the check costs a
    scan, not a copy."""
    return each_text(value, _storable_text)


def _storable_text(text: str) -> str:
    if text.isascii() and "\x00" not in text:  # most text, at a fraction of the search's cost
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text) if _UNSTORABLE.search(text) else text


def each_text(value: Value, change: Callable[[str], str]) -> Value:
    """`value` with `change` applied to every string in it: itself, or the keys and items of its
    dicts, lists and tuples and the fields of its dataclasses (an event), all the way down. The
    very value, not a copy, where `change` changed nothing."""
    return _each(value, change)  # type: ignore[no-any-return]


def _each(value: Any, change: Callable[[str], str]) -> Any:
    kind: type = type(value)
    if kind is str:
        return change(value)
    if kind in _NO_TEXT:  # most of an event's fields: nothing to look into
        return value
    if isinstance(value, str):
        return change(value)
    if kind is dict:
        keys, items = _each_of(list(value), change), _each_of(list(value.values()), change)
        if keys is None and items is None:
            return value
        return dict(zip(keys or list(value), items or list(value.values()), strict=True))
    if kind is list or kind is tuple:
        items = _each_of(value, change)
        return value if items is None else kind(items)
    if hasattr(kind, "__dataclass_fields__"):  # a dataclass's instance (its class is a type)
        fields: dict[str, Any] = {}
        for name in _init_fields(kind):
            old = getattr(value, name)
            if (new := _each(old, change)) is not old:
                fields[name] = new
        return dataclasses.replace(value, **fields) if fields else value
    return value


# The types that hold no text (exactly these: a subclass, say a StrEnum, may).
_NO_TEXT = frozenset({int, float, bool, type(None)})


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    """The fields `dataclasses.replace` takes, read once a class."""
    return tuple(field.name for field in dataclasses.fields(cls) if field.init)


def _each_of(values: Sequence[Any], change: Callable[[str], str]) -> list[Any] | None:
    """Each of `values` changed; None when none was (and then no list is built)."""
    new: list[Any] | None = None
    for at, value in enumerate(values):
        changed = _each(value, change)
        if new is not None:
            new.append(changed)
        elif changed is not value:
            new = [*values[:at], changed]
    return new


def excerpt(text: str, limit: int) -> str:
    """`text` on one line (every run of whitespace one space), at most `limit` characters: a
    longer text is cut and ends with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)].rstrip() + ELLIPSIS


# What a model may read as a <<<marker>>>'s angle brackets: their own, and look-alikes
# (full-width, small, guillemets, mathematical and CJK angle brackets).
_ANGLES = (
    "<>\uff1c\uff1e\ufe64\ufe65\u2039\u203a\u00ab\u00bb\u2329\u232a\u300a\u300b"
    "\u226a\u226b\u27e8\u27e9\u27ea\u27eb\u276e\u276f\u276c\u276d\u29fc\u29fd\u3008\u3009"
)
# Between two of them, what leaves them reading as one run: spaces, and the invisible characters
# (soft hyphen, zero-width spaces and joiners, direction marks) that only the model's tokens see.
_BETWEEN = r"[\s\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]*"


def _bracket_runs(least: int) -> re.Pattern[str]:
    """Runs of at least `least` brackets, whole (greedy): removing a whole run cannot join its
    neighbours into a new one, for its neighbours are not brackets."""
    return re.compile(f"[{_ANGLES}](?:{_BETWEEN}[{_ANGLES}]){{{least - 1},}}")


_DELIMITER_LIKE = _bracket_runs(2)
_MARKER_LIKE = _bracket_runs(3)


def undelimited(text: str) -> str:
    """Text Loop quotes in a <<<delimited>>> section of its own (a memory, the person's
    instructions, a model's own output): no run of two brackets or look-alikes is left, so it
    can neither open nor close one. A lone bracket (a French « quote », `a < b`) is kept."""
    return _DELIMITER_LIKE.sub("", text)


def unmarked(text: str) -> str:
    """Text from outside quoted in a block (an MCP server's answer, a web result): no run of
    three brackets or look-alikes that could forge the block's <<<markers>>>, while a program's
    `a << b` or `>>` survives."""
    return _MARKER_LIKE.sub("", text)
