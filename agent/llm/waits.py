"""How long to wait before asking a model server again, and saying when.

The server's own hint (retry-after, retry-after-ms, a date, Groq's and OpenAI's rate-limit reset
times) when it gives a sensible one, at most MAX_HINT; the client sits a wait out only if it fits
in MAX_WAIT and in the time the run has left.
"""

import email.utils
import math
import re
import time
from collections.abc import Mapping

# The longest wait for a rate limit or an outage that Loop sits out inside a run; a longer one
# fails the run at once with the time to try again.
MAX_WAIT = 60.0


def fits(wait: float, deadline: float | None) -> bool:
    return deadline is None or time.monotonic() + wait < deadline


# The longest wait a server's hint is taken at: a longer one (or a nonsense one, a year or
# `1e308`) is said as this, never handed to the clock, which cannot show it.
MAX_HINT = 7 * 24 * 3600.0


def hinted_wait(headers: Mapping[str, str]) -> float | None:
    """How long the server says to wait, if it says so sensibly (a number of seconds or
    milliseconds, a date, a reset time); at most MAX_HINT."""
    hinted = _hint(headers)
    return None if hinted is None else min(hinted, MAX_HINT)


def _hint(headers: Mapping[str, str]) -> float | None:
    if milliseconds := _number(headers.get("retry-after-ms")):
        return milliseconds / 1000
    retry_after = headers.get("retry-after")
    if retry_after:
        seconds = _number(retry_after)
        if seconds is not None:
            return seconds
        try:
            when = email.utils.parsedate_to_datetime(retry_after).timestamp()
        except (TypeError, ValueError):
            return None
        return max(when - time.time(), 0.0)
    # No retry-after: the reset time of whichever rate-limit window is spent.
    for window in ("tokens", "requests"):
        if headers.get(f"x-ratelimit-remaining-{window}") == "0":
            reset = _duration(headers.get(f"x-ratelimit-reset-{window}", ""))
            if reset is not None:
                return reset
    return None


def _number(text: str | None) -> float | None:
    """A count of seconds a server sent: finite and not negative, or none (`nan`, `-5`)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration(text: str) -> float | None:
    """Reset times look like `7.66s`, `2m59.56s` or `120ms` (Groq, OpenAI)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def try_again_at(wait: float) -> str:
    """`in 8 seconds (after 18:32:05 UTC)`: a person can act on both halves."""
    at = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
    if wait < 90:
        seconds = max(round(wait), 1)
        amount = f"{seconds} second{'s' if seconds > 1 else ''}"
    elif wait < 90 * 60:
        amount = f"{round(wait / 60)} minutes"
    else:
        amount = f"{wait / 3600:.1f} hours"
    return f"in {amount} (after {at})"
