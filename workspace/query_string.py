"""A request's query string, read typed and bounded: every view of the site reads its `?name=`
values here, so a malformed one (a NUL, "²", a fraction, 10,000 characters) is the client's error,
a 400 that says which value and why, never a server error. An absent value is the caller's
default. Here, in the lowest layer that serves pages (the Files panel), so every app can use it.
"""

import re

from django.core.exceptions import BadRequest
from django.http import HttpRequest

# A number as a link or a form sends it (an id, a page): ASCII digits, as many as a database id
# can have. Not str.isdigit(), which takes "²" (that int() refuses) and any number of digits
# (int() reads at most 4,300).
WHOLE_NUMBER = re.compile(r"[0-9]{1,20}")


class MalformedQuery(BadRequest):
    """A value of the query string that is not what its view reads; the message says which, in
    Loop's words (never the value's), so the 400 page may show it (loopsite/errors.py)."""


def whole_number(raw: str) -> int | None:
    """The number `raw` spells, or None if it spells none."""
    return int(raw) if WHOLE_NUMBER.fullmatch(raw) else None


def query_int(request: HttpRequest, name: str) -> int | None:
    """The whole number of `?name=`, or None if the query has none (or an empty one)."""
    raw = request.GET.get(name, "")
    if not raw:
        return None
    number = whole_number(raw)
    if number is None:
        raise MalformedQuery(f"The address's {name!r} is not a whole number of at most 20 digits.")
    return number


def query_text(request: HttpRequest, name: str, max_length: int) -> str:
    """The text of `?name=`, "" if the query has none. A NUL (which PostgreSQL cannot store or
    compare, and no form of the site sends) or more than `max_length` characters is refused."""
    text = request.GET.get(name, "")
    if "\x00" in text:
        raise MalformedQuery(f"The address's {name!r} holds a NUL character.")
    if len(text) > max_length:
        raise MalformedQuery(
            f"The address's {name!r} is {len(text):,} characters long, over the {max_length:,} "
            "it may be."
        )
    return text
