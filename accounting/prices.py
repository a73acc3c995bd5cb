"""The price table: what a model's tokens cost at a moment, and a turn's cost, exactly.

Two sources, read together: the operators' rows in the console (accounting.Price) and
`LOOP_PRICES`, JSON in the environment for a reproducible deployment:

    {"llama-3.3-70b-versatile": {"input": 0.59, "output": 0.79, "currency": "USD"},
     "gpt-4o-mini": [{"input": 0.15, "output": 0.6, "cached_input": 0.075,
                      "effective_from": "2026-01-01"}]}

A model's price at a moment is the entry of the latest `effective_from` not after it (an entry
of the environment without one applies from the beginning); of a console row and an entry of
the environment from the same moment, the console's wins. A model with no price then has none:
its turns cost "price unknown", never 0. Amounts are decimals from end to end (the JSON's
numbers are read as decimals, never as floats).
"""

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.dateparse import parse_date, parse_datetime

from accounting.models import CACHE_SECONDS, Price

MILLION = Decimal(1_000_000)
# Costs are kept to this many places (accounting.models.COST_PLACES).
COST_QUANTUM = Decimal("1e-12")
BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
KEYS = {"input", "output", "cached_input", "currency", "effective_from"}


@dataclass(frozen=True)
class Rate:
    """A model's prices per million tokens from `effective_from` on; `price_id`: its console
    row (None: from LOOP_PRICES)."""

    model: str
    input: Decimal
    output: Decimal
    cached_input: Decimal | None
    currency: str
    effective_from: datetime
    price_id: int | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Decimal:
        """What a turn of these tokens costs, exactly: cached prompt tokens at the cached
        price (the input price when there is none), the rest of the prompt at the input price."""
        cached = min(cached_tokens, prompt_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        amount = (
            (prompt_tokens - cached) * self.input
            + cached * cached_price
            + completion_tokens * self.output
        ) / MILLION
        return amount.quantize(COST_QUANTUM)


def rate_at(model: str, when: datetime) -> Rate | None:
    """The model's price at `when`, or None: it had none."""
    rates = [
        rate
        for rate in (*configured_rates().get(model, ()), *console_rates().get(model, ()))
        if rate.effective_from <= when
    ]
    # The latest; of two from one moment, the console's (it sorts after: a price_id).
    return max(
        rates, key=lambda rate: (rate.effective_from, rate.price_id is not None), default=None
    )


class ConsoleRates:
    """The console's price table, read whole (a few rows a model) at most every CACHE_SECONDS
    by each process, and at once in the process that changed it (accounting/signals.py): a
    model turn, priced as it is recorded, costs no query. A price takes effect at the earliest
    NOTICE after it is set (accounting.models.Price.clean), so every process has read it by then,
    and no turn is priced by a table that was out of date."""

    def __init__(self) -> None:
        self.read_at = -math.inf
        self.rates: dict[str, tuple[Rate, ...]] = {}

    def __call__(self) -> dict[str, tuple[Rate, ...]]:
        if time.monotonic() - self.read_at >= CACHE_SECONDS:
            rates: dict[str, list[Rate]] = {}
            for row in Price.objects.order_by("model", "effective_from"):
                rates.setdefault(row.model, []).append(rate_of(row))
            self.rates = {model: tuple(each) for model, each in rates.items()}
            self.read_at = time.monotonic()
        return self.rates

    def forget(self) -> None:
        self.read_at = -math.inf


console_rates = ConsoleRates()


def rate_of(row: Price) -> Rate:
    return Rate(
        row.model,
        row.input,
        row.output,
        row.cached_input,
        row.currency,
        row.effective_from,
        row.pk,
    )


def configured_rates() -> dict[str, tuple[Rate, ...]]:
    return parse_prices(settings.LOOP_PRICES)


@cache
def parse_prices(raw: str) -> dict[str, tuple[Rate, ...]]:
    """LOOP_PRICES read, each model's entries (one object, or a list of them); a clear error
    for anything else."""
    if not raw.strip():
        return {}
    try:
        table = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    except ValueError as error:
        raise ImproperlyConfigured(f"LOOP_PRICES is not JSON: {error}") from None
    if not isinstance(table, dict):
        raise ImproperlyConfigured("LOOP_PRICES must be a JSON object of model names.")
    return {
        str(model): tuple(
            rate_from(str(model), entry)
            for entry in (entries if isinstance(entries, list) else [entries])
        )
        for model, entries in table.items()
    }


def rate_from(model: str, entry: Any) -> Rate:
    where = f"LOOP_PRICES[{model!r}]"
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(
            f'{where} must be an object like {{"input": 0.15, "output": 0.6}}.'
        )
    if unknown := set(entry) - KEYS:
        raise ImproperlyConfigured(f"{where} has unknown keys: {', '.join(sorted(unknown))}.")
    cached = entry.get("cached_input")
    return Rate(
        model,
        amount(entry.get("input"), f"{where}.input"),
        amount(entry.get("output"), f"{where}.output"),
        None if cached is None else amount(cached, f"{where}.cached_input"),
        currency(entry.get("currency", "USD"), f"{where}.currency"),
        moment(entry.get("effective_from"), f"{where}.effective_from"),
    )


def amount(value: Any, where: str) -> Decimal:
    try:
        number = Decimal(value) if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        number = Decimal(-1)
    if value is None or isinstance(value, bool) or not number.is_finite() or number < 0:
        raise ImproperlyConfigured(f"{where} must be a number of at least 0, not {value!r}.")
    return number


def currency(value: Any, where: str) -> str:
    if not (isinstance(value, str) and len(value) == 3 and value.isalpha()):
        raise ImproperlyConfigured(f'{where} must be a currency code like "USD", not {value!r}.')
    return value.upper()


def moment(value: Any, where: str) -> datetime:
    """A date ("2026-01-01": its midnight, UTC) or a moment with its offset."""
    if value is None:
        return BEGINNING
    if isinstance(value, str):
        if (when := parse_datetime(value)) is not None:
            return when if when.tzinfo else when.replace(tzinfo=UTC)
        if (day := parse_date(value)) is not None:
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
    raise ImproperlyConfigured(f'{where} must be a date like "2026-01-01", not {value!r}.')
