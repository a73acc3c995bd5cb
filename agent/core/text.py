"""Text helpers every layer shares (agent.core is the bottom one)."""

import dataclasses
import re
from collections.abc import Callable, Iterable
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
    if isinstance(value, str):
        return change(value)
    if type(value) is dict:
        keys, items = _each_of(value.keys(), change), _each_of(value.values(), change)
        if keys is None and items is None:
            return value
        return dict(zip(keys or list(value), items or list(value.values()), strict=True))
    if type(value) in (list, tuple):
        items = _each_of(value, change)
        return value if items is None else type(value)(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            field.name: new
            for field in dataclasses.fields(value)
            if field.init and (new := _each(old := getattr(value, field.name), change)) is not old
        }
        return dataclasses.replace(value, **fields) if fields else value
    return value


def _each_of(values: Iterable[Any], change: Callable[[str], str]) -> list[Any] | None:
    """Each of `values` changed; None when none was."""
    old = list(values)
    new = [_each(value, change) for value in old]
    return None if all(a is b for a, b in zip(new, old, strict=True)) else new


def excerpt(text: str, limit: int) -> str:
    """`text` on one line (every run of whitespace one space), at most `limit` characters: a
    longer text is cut and ends with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)].rstrip() + ELLIPSIS
