"""Quotas over a period: how much a person may use (runs, tokens, cost) in a day, week or month,
read from the ledger (accounting.models.Charge), checked before a run starts and before each
model turn.

The site's quotas come from `LOOP_QUOTA`, comma-separated `MEASURE=LIMIT/PERIOD` items:

    runs=50/day, tokens=2000000/month, cost=5/month, cost=20EUR/rolling-month

MEASURE is `runs`, `tokens` or `cost`; LIMIT a whole number (runs, tokens) or an amount with an
optional ISO 4217 currency after it (cost; USD when none); PERIOD `day`, `week` or `month` for the
calendar period under way in the site's time zone, or `rolling-day`, `rolling-week`,
`rolling-month` for the last 24 hours, 7 days or 30 days. Operators add quotas per group and per
person in the console (accounting.models.Quota). Every quota that applies to a person is checked
(the site's, each of their groups', their own): the tightest wins, and any one reached refuses.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import DecimalField, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast
from django.utils import timezone

from accounting.models import Charge, ChargeKind, Measure, Period, Quota, Window

SITE = "the site's"
WHOLE = DecimalField(max_digits=20, decimal_places=0)
ROLLING_LENGTH = {Period.DAY: timedelta(days=1), Period.WEEK: timedelta(days=7),
                  Period.MONTH: timedelta(days=30)}  # fmt: skip
PERIOD_WORDS = {Period.DAY: "a day", Period.WEEK: "a week", Period.MONTH: "a month"}
ROLLING_WORDS = {Period.DAY: "in 24 hours", Period.WEEK: "in 7 days", Period.MONTH: "in 30 days"}
ITEM = re.compile(
    r"^(?P<measure>[a-z]+)=(?P<limit>\d+(?:\.\d+)?)(?P<currency>[A-Z]{3})?"
    r"/(?P<rolling>rolling-)?(?P<period>[a-z]+)$"
)
# pg_advisory_xact_lock's key space for quotas: a person's starts are judged one at a time.
LOCK_SPACE = 0x51554F54 << 32
SYNTAX = (
    "LOOP_QUOTA is comma-separated MEASURE=LIMIT/PERIOD items, like "
    "'runs=50/day,tokens=2000000/month,cost=5/month,cost=20EUR/rolling-month': MEASURE runs, "
    "tokens or cost; PERIOD day, week or month (the calendar period), or rolling-day, "
    "rolling-week, rolling-month (the last 24 hours, 7 or 30 days)."
)


@dataclass(frozen=True)
class Limit:
    """One quota as it applies to a person; `source` says whose it is (the site's, a group's,
    the person's own)."""

    measure: Measure
    amount: Decimal
    period: Period
    rolling: bool = False
    currency: str = "USD"
    source: str = SITE

    def in_words(self) -> str:
        per = (ROLLING_WORDS if self.rolling else PERIOD_WORDS)[self.period]
        return f"{amount_in_words(self.measure, self.amount, self.currency)} {per}"


@dataclass(frozen=True)
class Standing:
    """Where a person stands against one quota now: used so far in its window, and when the
    window lets them go on (a calendar period's end; for a rolling window, the moment enough of
    what they used falls out of it)."""

    limit: Limit
    used: Decimal
    resets_at: datetime

    @property
    def reached(self) -> bool:
        return self.used >= self.limit.amount

    @property
    def remaining(self) -> Decimal:
        return max(self.limit.amount - self.used, Decimal(0))

    @property
    def share_used(self) -> float:
        """How much of the quota is used, 0 to 1 (a gauge's value)."""
        if self.limit.amount <= 0:
            return 1.0
        return min(float(self.used / self.limit.amount), 1.0)

    def retry_after(self, now: datetime | None = None) -> int:
        """Whole seconds until it resets (an HTTP Retry-After), at least one."""
        left = (self.resets_at - (now or timezone.now())).total_seconds()
        return max(int(left) + (left % 1 > 0), 1)

    def in_words(self) -> str:
        """What was reached and when it resets, for the person refused a start."""
        return f"You have reached {self.what()}. It resets at {self.when()}."

    def halt_words(self) -> str:
        """The same, as a halt's detail reads (the chat: "Halted: it reached ...")."""
        return f"it reached {self.what()}; it resets at {self.when()}."

    def what(self) -> str:
        whose = "your" if self.limit.source == "yours" else self.limit.source
        used = amount_in_words(self.limit.measure, self.used, self.limit.currency)
        return f"{whose} quota of {self.limit.in_words()} ({used} used)"

    def when(self) -> str:
        return moment_in_words(self.resets_at)


def amount_in_words(measure: str, amount: Decimal, currency: str) -> str:
    if measure == Measure.COST:
        return f"{amount.normalize():f} {currency}"
    noun = "run" if measure == Measure.RUNS else "token"
    whole = int(amount)
    return f"{whole:,} {noun}" + ("" if whole == 1 else "s")


def moment_in_words(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M %Z")


def parse_quota(text: str) -> tuple[Limit, ...]:
    """The site's quotas from LOOP_QUOTA's text; ImproperlyConfigured, naming the item, if any
    item is not MEASURE=LIMIT/PERIOD."""
    limits = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = ITEM.match(item)
        if match is None:
            raise ImproperlyConfigured(
                f"LOOP_QUOTA: {item!r} is not MEASURE=LIMIT/PERIOD. {SYNTAX}"
            )
        limits.append(limit_of(item, **match.groupdict()))
    return tuple(limits)


def limit_of(
    item: str, *, measure: str, limit: str, currency: str | None, rolling: str | None, period: str
) -> Limit:
    if measure not in Measure.values:
        raise ImproperlyConfigured(f"LOOP_QUOTA: {item!r}: no measure {measure!r}. {SYNTAX}")
    if period not in Period.values:
        raise ImproperlyConfigured(f"LOOP_QUOTA: {item!r}: no period {period!r}. {SYNTAX}")
    try:
        amount = Decimal(limit)
    except InvalidOperation:  # the pattern lets only digits through; kept for safety's sake
        raise ImproperlyConfigured(f"LOOP_QUOTA: {item!r}: {limit!r} is no number.") from None
    if measure != Measure.COST and (currency or amount != amount.to_integral_value()):
        raise ImproperlyConfigured(
            f"LOOP_QUOTA: {item!r}: {measure} are counted in whole numbers, with no currency."
        )
    return Limit(Measure(measure), amount, Period(period), bool(rolling), currency or "USD")


@cache
def site_limits(text: str) -> tuple[Limit, ...]:
    return parse_quota(text)


def limits_of(user_id: int) -> list[Limit]:
    """Every quota that applies to the person: the site's, their groups', their own."""
    limits = list(site_limits(settings.LOOP_QUOTA))
    groups = Group.objects.filter(user__id=user_id).values("pk")
    rows = Quota.objects.filter(Q(user_id=user_id) | Q(group__in=groups)).select_related("group")
    limits.extend(limit_of_row(row) for row in rows)
    return limits


def limit_of_row(row: Quota) -> Limit:
    source = f"the group {row.group.name}'s" if row.group is not None else "yours"
    return Limit(
        Measure(row.measure),
        row.limit,
        Period(row.period),
        row.window == Window.ROLLING,
        row.currency or "USD",
        source,
    )


def window_of(limit: Limit, now: datetime) -> tuple[datetime, datetime | None]:
    """Where the quota's window starts, and where a calendar one ends (None: rolling)."""
    if limit.rolling:
        return now - ROLLING_LENGTH[limit.period], None
    today = timezone.localtime(now).date()
    if limit.period == Period.DAY:
        start, end = today, today + timedelta(days=1)
    elif limit.period == Period.WEEK:
        start = today - timedelta(days=today.weekday())
        end = start + timedelta(days=7)
    else:
        start = today.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    return midnight(start), midnight(end)


def midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time()))


def counted(user_id: int, limit: Limit, since: datetime) -> "QuerySet[Charge]":
    """The person's charges that count against the quota, since `since`."""
    charges = Charge.objects.filter(user_id=user_id, at__gte=since).order_by()
    if limit.measure == Measure.RUNS:
        return charges.filter(kind=ChargeKind.RUN).annotate(amount=Value(Decimal(1)))
    turns = charges.filter(kind=ChargeKind.TURN)
    if limit.measure == Measure.TOKENS:
        tokens = Cast(F("prompt_tokens") + F("completion_tokens"), WHOLE)
        return turns.annotate(amount=tokens)
    # A turn with no price counts nothing here ("price unknown", never 0 and never a guess).
    priced = turns.filter(cost__isnull=False, currency=limit.currency)
    return priced.annotate(amount=F("cost"))


def standing(user_id: int, limit: Limit, now: datetime) -> Standing:
    since, end = window_of(limit, now)
    charges = counted(user_id, limit, since)
    used = charges.aggregate(used=Sum("amount", default=Decimal(0)))["used"]
    if end is None:
        end = rolling_reset(charges, used, limit, now)
    return Standing(limit, Decimal(used), end)


def rolling_reset(
    charges: "QuerySet[Charge]", used: Decimal, limit: Limit, now: datetime
) -> datetime:
    """When enough of the window's oldest charges fall out of it that the person is under the
    quota again (now, if they are already)."""
    if used < limit.amount:
        return now
    oldest_first = charges.order_by("at").values_list("at", "amount")  # type: ignore[misc]
    for at, amount in oldest_first:
        used -= amount
        if used < limit.amount:
            moment: datetime = at + ROLLING_LENGTH[limit.period]
            return moment
    return now + ROLLING_LENGTH[limit.period]  # a limit of 0: never, within the window


def standings(user_id: int, now: datetime | None = None) -> list[Standing]:
    """The person's standing against every quota that applies to them (empty: none does)."""
    now = now or timezone.now()
    return [standing(user_id, limit, now) for limit in limits_of(user_id)]


def first_reached(found: Sequence[Standing]) -> Standing | None:
    """Of the quotas reached, the one that lets the person go on last."""
    reached = [one for one in found if one.reached]
    return max(reached, key=lambda one: one.resets_at, default=None)


def reached_before_start(
    user_id: int, *, starting: bool = True, now: datetime | None = None
) -> Standing | None:
    """Whether the person may start a run (`starting`), or let one go on (a Continue: the same
    run, which a runs quota does not count again): the quota reached, or None. Call inside the
    transaction that records the start (charge_run_start): the person's starts wait for each
    other here, so two at once cannot both pass the last place."""
    limits = [limit for limit in limits_of(user_id) if starting or spent_by_turns(limit)]
    if not limits:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_SPACE + user_id])
    now = now or timezone.now()
    return first_reached([standing(user_id, limit, now) for limit in limits])


def spent_by_turns(limit: Limit) -> bool:
    """Whether model turns spend the quota (tokens, cost), not only starts (runs)."""
    return limit.measure != Measure.RUNS


def charge_run_start(user_id: int, run_id: int, conversation_id: int | None) -> None:
    """The ledger's entry for a run begun (what a runs quota counts)."""
    Charge.objects.create(
        kind=ChargeKind.RUN, user_id=user_id, run_id=run_id, conversation_id=conversation_id
    )


def turn_allowance(user_id: int) -> Callable[[], str | None]:
    """What a run of the person asks before each model turn: None while no quota of tokens or
    cost is reached (a runs quota was asked at its start), else what was reached and when it
    resets, in words. The quotas are read once, when the run is taken
    up; what was used, at each turn (the ledger has every turn recorded so far, the run's own
    and its siblings', so runs at once overspend by at most the turn each has under way)."""
    limits = [limit for limit in limits_of(user_id) if spent_by_turns(limit)]
    if not limits:
        return no_quota

    def allowance() -> str | None:
        now = timezone.now()
        reached = first_reached([standing(user_id, limit, now) for limit in limits])
        return None if reached is None else reached.halt_words()

    return allowance


def no_quota() -> str | None:
    return None
