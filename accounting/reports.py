"""What the ledger says to people: a cost in words, and the operators' cost report (cost per
person, group, model or day over a range, one row per currency).

A row's cost is the sum of its priced turns in one currency; the turns that had no price make a
row of their own, "price unknown", with their tokens: never a cost of 0 that would hide them.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, NullIf, TruncDate

from accounting.ledger import Spend
from accounting.models import Charge, ChargeKind

PRICE_UNKNOWN = "price unknown"
NO_GROUP = "(no group)"


def amount_text(amount: Decimal) -> str:
    """A cost as people read it: every significant digit, no trailing zeros, no exponent."""
    shown = format(amount.normalize(), "f")
    return "0" if shown in {"-0", ""} else shown


def cost_text(spend: Spend) -> str:
    """A spend's cost in words: "0.000491 USD", "price unknown" when a turn had no price (a
    partial sum would mislead), "" when there was no turn at all."""
    if spend.turns == 0:
        return ""
    if spend.unpriced_turns:
        return PRICE_UNKNOWN
    return ", ".join(
        f"{amount_text(cost)} {currency}" for currency, cost in sorted(spend.costs.items())
    )


def single_cost(spend: Spend) -> tuple[Decimal | None, str]:
    """A spend's cost and currency when it is one known amount in one currency, else
    (None, ""): the price unknown, or no turn, or costs in several currencies."""
    if spend.turns == 0 or spend.unpriced_turns or len(spend.costs) != 1:
        return None, ""
    ((currency, cost),) = spend.costs.items()
    return cost, currency


@dataclass(frozen=True)
class ReportRow:
    """One line of the report: what `key`'s turns in one currency cost ("" currency: the turns
    that had no price, their cost None)."""

    key: str
    currency: str
    turns: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: Decimal | None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_text(self) -> str:
        return PRICE_UNKNOWN if self.cost is None else amount_text(self.cost)

    def cells(self) -> list[str]:
        """The row as the CSV export writes it, in the page's column order."""
        return [
            self.key,
            self.currency,
            str(self.turns),
            str(self.prompt_tokens),
            str(self.completion_tokens),
            str(self.cached_tokens),
            self.cost_text,
        ]


COLUMNS: tuple[str, ...] = ("key", "currency", "turns", "prompt_tokens", "completion_tokens")
COLUMNS += ("cached_tokens", "cost")


def by_person() -> dict[str, Any]:
    # A deleted account's charges have no user and its anonymous id instead.
    return {"key": Coalesce(F("user__username"), NullIf(F("person"), Value("")))}


def by_group() -> dict[str, Any]:
    # A person in two groups counts in both (a join on their groups); nobody's in none.
    return {"key": Coalesce(F("user__groups__name"), Value(NO_GROUP))}


def by_model() -> dict[str, Any]:
    return {"key": F("model")}


def by_day() -> dict[str, Any]:
    return {"key": TruncDate("at")}  # in the site's current time zone


DIMENSIONS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "person": ("Person", by_person),
    "group": ("Group", by_group),
    "model": ("Model", by_model),
    "day": ("Day", by_day),
}


def turns_between(start: datetime, end: datetime) -> "QuerySet[Charge]":
    return Charge.objects.filter(kind=ChargeKind.TURN, at__gte=start, at__lt=end).order_by()


def cost_report(
    dimension: str, start: datetime, end: datetime, sort: str = "key", descending: bool = False
) -> list[ReportRow]:
    """The turns recorded from `start` to `end` summed per `dimension` and currency, sorted by
    the column `sort` (an unknown cost sorts after every known one, either way). One query."""
    _, key = DIMENSIONS[dimension]
    keyed: Any = turns_between(start, end).annotate(**key())
    rows = keyed.values("key", "currency").annotate(
        turns=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cached=Sum("cached_tokens"),
        total=Sum("cost"),
    )
    report = [
        ReportRow(
            key=text_of(row["key"]),
            currency=row["currency"],
            turns=row["turns"],
            prompt_tokens=row["prompt"],
            completion_tokens=row["completion"],
            cached_tokens=row["cached"],
            cost=row["total"] if row["currency"] else None,
        )
        for row in rows
    ]
    return sorted_rows(report, sort if sort in COLUMNS else "key", descending)


def text_of(key: Any) -> str:
    if isinstance(key, date):
        return key.isoformat()
    return "" if key is None else str(key)


def sorted_rows(rows: Sequence[ReportRow], column: str, descending: bool) -> list[ReportRow]:
    """Rows by one column, then by key and currency; rows without a value in it (a cost
    unknown) always last."""
    ordered = sorted(rows, key=lambda row: (row.key, row.currency))

    def has_value(row: ReportRow) -> bool:
        return getattr(row, column) is not None

    known = sorted(
        (row for row in ordered if has_value(row)),
        key=lambda row: getattr(row, column),
        reverse=descending,
    )
    return known + [row for row in ordered if not has_value(row)]


@dataclass(frozen=True)
class Totals:
    """The whole range's figures: cost per currency and the turns with no price."""

    turns: int
    tokens: int
    costs: dict[str, Decimal]
    unpriced_turns: int

    @property
    def costs_text(self) -> list[str]:
        return [f"{amount_text(cost)} {currency}" for currency, cost in sorted(self.costs.items())]


def totals_between(start: datetime, end: datetime) -> Totals:
    """Each turn once (the group report counts a person in two groups twice; these do not)."""
    charges = turns_between(start, end)
    figures = charges.aggregate(
        turns=Count("id"),
        prompt=Sum("prompt_tokens", default=0),
        completion=Sum("completion_tokens", default=0),
        unpriced=Count("id", filter=Q(cost__isnull=True)),
    )
    costs = {
        row["currency"]: row["cost"]
        for row in charges.filter(cost__isnull=False).values("currency").annotate(cost=Sum("cost"))
    }
    return Totals(
        figures["turns"], figures["prompt"] + figures["completion"], costs, figures["unpriced"]
    )
