"""/api/v1/quota: where the key's person stands against each quota that applies to them
(accounting/quotas.py): the limit, what is used and remains, and when it resets."""

from datetime import datetime
from decimal import Decimal

from django.http import HttpRequest
from ninja import Field, Router, Schema

from accounting.quotas import Standing, standings
from api.auth import READ, person_of
from api.errors import refusals

router = Router(tags=["quota"])


class QuotaOut(Schema):
    measure: str = Field(description='"runs", "tokens" or "cost".')
    limit: Decimal
    used: Decimal
    remaining: Decimal
    currency: str = Field(description="A cost quota's currency; '' for runs and tokens.")
    period: str = Field(description='"day", "week" or "month".')
    rolling: bool = Field(description="The last 24 hours, 7 or 30 days, not the calendar's.")
    source: str = Field(description="Whose quota: the site's, a group's, or yours.")
    reached: bool = Field(description="No run of yours starts, or goes on, until it resets.")
    resets_at: datetime = Field(description="When you may go on again, once it is reached.")


def quota_out(standing: Standing) -> QuotaOut:
    limit = standing.limit
    return QuotaOut(
        measure=limit.measure.value,
        limit=limit.amount,
        used=standing.used,
        remaining=standing.remaining,
        currency=limit.currency if limit.measure == "cost" else "",
        period=limit.period.value,
        rolling=limit.rolling,
        source=limit.source,
        reached=standing.reached,
        resets_at=standing.resets_at,
    )


@router.get("/quota", response={200: list[QuotaOut], **refusals()}, auth=READ)
def read_quota(request: HttpRequest) -> list[QuotaOut]:
    """Your standing against every quota that applies to you (none: an empty list). Every one
    is checked: any reached refuses a run's start (429 `quota_reached`) and halts a run."""
    return [quota_out(standing) for standing in standings(person_of(request).pk)]
