"""What a model server says, as Loop shows and records it.

A hostile or broken server may send anything in an error, a model list or a reply: what Loop keeps
of it is storable in PostgreSQL, short, free of a terminal's escapes, and never shows the key or the
base URL's secrets, even when the server echoes them (docs/security.md).
"""

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from core.llm import LLMError
from core.text import storable


def secrets_of(base_url: str, api_key: str) -> tuple[str, ...]:
    """What a message must never show: the key, and the base URL's password and query values
    (as given and as sent, percent-encoded). Short ones are left: they would blank out words."""
    parts = urlsplit(base_url)
    found = [api_key, parts.password or ""]
    found += [value for _, value in parse_qsl(parts.query)]
    found += [quote(value, safe="") for value in found]
    return tuple(sorted({secret for secret in found if len(secret) >= 6}, key=len, reverse=True))


def scrubbed_url(url: str) -> str:
    """A URL as a message shows it: without a user, password, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "a URL Loop cannot read"
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))


# What is kept of what a server says (an error's message, a page where a reply should be).
MAX_SAID_CHARS = 500


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clipped(text: str) -> str:
    """Text a server sent, as Loop shows and records it: at most MAX_SAID_CHARS, its control
    characters (a terminal's escapes) written as `?`."""
    text = storable(_CONTROL.sub("?", text))
    if len(text) > MAX_SAID_CHARS:
        return f"{text[:MAX_SAID_CHARS]}… ({len(text) - MAX_SAID_CHARS:,} more characters)"
    return text


def listable_name(model: dict[str, Any]) -> bool:
    """A model list's entry with a name one could set: `manage.py modelcheck` prints it in the
    operator's terminal, so never a control character (a terminal's escape) or a page of text."""
    name = model.get("id")
    return isinstance(name, str) and 0 < len(name) <= 256 and not _CONTROL.search(name)


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Refused:
    """What the bounded HTTP policy (netguard.bounded) refuses of a model server, said as the
    LLMError that ends the turn: the server by name and, for a redirect, the setting to change."""

    server: str
    base_url_setting: str

    def redirect(self, status: int, location: str) -> LLMError:
        return LLMError(
            f"{sentence(self.server)} answered {status} with a redirect to "
            f"{clipped(scrubbed_url(location))}; Loop follows a model server's redirects only "
            f"within its own scheme, host and port. Set {self.base_url_setting} to the URL the "
            "server means.",
            status=status,
        )

    def compressed(self, coding: str) -> LLMError:
        return LLMError(
            f"{sentence(self.server)} sent a compressed reply ({clipped(coding)}) it was "
            "not asked for; Loop does not inflate one."
        )

    def too_large(self, limit: int) -> LLMError:
        return LLMError(
            f"{sentence(self.server)} sent more than {limit // 2**20} MiB in one answer; Loop "
            "read no more of it."
        )
