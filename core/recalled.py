"""A memory recalled for a run: the one type the store returns, the loop puts in the prompt, the
run's log records and the console and chat show. Plain Python, so the loop can use it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class RecalledMemory:
    """`score` is what ranked it; `parts` are the signals the score was made of."""

    id: int
    text: str
    score: float
    parts: dict[str, float]
