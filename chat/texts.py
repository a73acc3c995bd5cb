"""The texts one card shows, each cut to a length a frame carries, with a note that links to
the whole (chat/views.py serves it)."""

from typing import Any

from django.urls import reverse

# The most expanding input, a fenced block of one-character tokens, renders 10 000 characters as
# some 270 KB of highlighted HTML: a frame of its own, far under daphne's 1 MiB (chat/stream.py).
SHORT_TEXT_CHARS = 10_000
# The texts of an event a card may shorten: a field of the event, and what the note calls it.
EVENT_TEXTS = {
    "answer": "answer",
    "text": "text",
    "reasoning": "reasoning",
    "arguments": "arguments",
}


class Texts:
    """The texts one card shows, each shortened to SHORT_TEXT_CHARS with a note of its cut; with
    no limit, as a conversation's export reads them, each whole."""

    def __init__(self, run_id: int, seq: int, limit: int | None = SHORT_TEXT_CHARS) -> None:
        self.run_id, self.seq, self.limit = run_id, seq, limit
        self.cuts: list[dict[str, Any]] = []

    def fits(self, text: str) -> bool:
        """Whether a card shows all of `text`."""
        return self.limit is None or len(text) <= self.limit

    def head(self, text: str) -> str:
        """As much of `text` as a card shows, without a note: for a part of a text already noted."""
        return text[: self.limit]

    def shown(self, key: str, text: str) -> str:
        if self.fits(text):
            return text
        url = reverse("chat:event_text", args=[self.run_id, self.seq, key])
        self.cuts.append(
            {
                "what": EVENT_TEXTS[key],
                "shown": f"{self.limit:,}",
                "total": f"{len(text):,}",
                "url": url,
            }
        )
        return self.head(text)
