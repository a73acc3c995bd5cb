"""The ledger's entries as they are made, and what they sum to: per run, conversation, person.

A model turn's charge is made by whoever records the turn (agent.recorder, in the turn's own
statement: a turn recorded is a turn charged, once); its cost is computed then, from the price
the model had at that moment (accounting.prices), and never again.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from accounting.models import Charge, ChargeKind
from accounting.prices import rate_at


def turn_charge(
    *,
    user_id: int,
    run_id: int,
    conversation_id: int | None,
    step: int,
    provider: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    at: datetime,
) -> dict[str, Any]:
    """A model turn's entry, its fields by attribute name, priced at `at`."""
    rate = rate_at(model, at)
    cost = None if rate is None else rate.cost(prompt_tokens, completion_tokens, cached_tokens)
    return {
        "kind": ChargeKind.TURN.value,
        "user_id": user_id,
        "person": "",
        "run_id": run_id,
        "conversation_id": conversation_id,
        "step": step,
        "provider": provider,
        "model": model,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": min(cached_tokens, prompt_tokens),
        "cost": cost,
        "currency": "" if rate is None else rate.currency,
        "price_id": None if rate is None else rate.price_id,
        "at": at,
    }


@dataclass(frozen=True)
class Spend:
    """What some turns used and cost: tokens, the cost per currency of the priced turns, and how
    many turns had no price (their cost unknown: never counted as 0)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    turns: int = 0
    runs: int = 0
    costs: dict[str, Decimal] = field(default_factory=dict)
    unpriced_turns: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_known(self) -> bool:
        """Every turn had a price (and there was at least one turn)."""
        return self.turns > 0 and self.unpriced_turns == 0

    def cost_in(self, currency: str) -> Decimal:
        return self.costs.get(currency, Decimal(0))


SUMS = {
    "prompt_tokens": Sum("prompt_tokens", default=0),
    "completion_tokens": Sum("completion_tokens", default=0),
    "cached_tokens": Sum("cached_tokens", default=0),
    "turns": Count("id", filter=Q(kind=ChargeKind.TURN)),
    "runs": Count("id", filter=Q(kind=ChargeKind.RUN)),
    "unpriced_turns": Count("id", filter=Q(kind=ChargeKind.TURN, cost__isnull=True)),
}


def spend(charges: "QuerySet[Charge]") -> Spend:
    """What these charges sum to."""
    figures = charges.aggregate(**SUMS)
    costs = {
        row["currency"]: row["cost"]
        for row in charges.filter(cost__isnull=False)
        .order_by()
        .values("currency")
        .annotate(cost=Sum("cost"))
    }
    return Spend(**figures, costs=costs)


def spend_by_run(run_ids: Iterable[int]) -> dict[int, Spend]:
    """Each run's spend (a run with no charge is absent)."""
    ids = list(run_ids)
    if not ids:
        return {}
    charges = Charge.objects.filter(run_id__in=ids).order_by()
    rows: Any = charges.values("run_id").annotate(**SUMS)
    figures = {row["run_id"]: {name: row[name] for name in SUMS} for row in rows}
    costs: dict[int, dict[str, Decimal]] = {}
    priced = (
        charges.filter(cost__isnull=False).values("run_id", "currency").annotate(cost=Sum("cost"))
    )
    for row in priced:
        costs.setdefault(row["run_id"], {})[row["currency"]] = row["cost"]
    return {run: Spend(**row, costs=costs.get(run, {})) for run, row in figures.items()}


def spend_of_run(run_id: int) -> Spend:
    return spend(Charge.objects.filter(run_id=run_id))


def spend_of_conversation(conversation_id: int) -> Spend:
    return spend(Charge.objects.filter(conversation_id=conversation_id))


def spend_of_person(
    user_id: int, since: datetime | None = None, until: datetime | None = None
) -> Spend:
    charges = Charge.objects.filter(user_id=user_id)
    if since is not None:
        charges = charges.filter(at__gte=since)
    if until is not None:
        charges = charges.filter(at__lt=until)
    return spend(charges)
