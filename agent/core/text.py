"""Text helpers every layer shares (tools is the bottom one)."""

ELLIPSIS = "…"


def excerpt(text: str, limit: int) -> str:
    """`text` on one line (every run of whitespace one space), at most `limit` characters: a
    longer text is cut and ends with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)].rstrip() + ELLIPSIS
