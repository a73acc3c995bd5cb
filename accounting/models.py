"""What model turns cost: the operators' price table and the ledger of charges.

The ledger names runs, conversations and people by number, with no relation to their rows: a
charge outlives the conversation, the run's content and the account it was made for (an account's
charges keep an anonymous id instead, accounting/signals.py), so totals never change after the
fact. It stands below the agent app, which writes a charge with each model turn it records.
"""

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

# Prices per million tokens, to 1e-8 of a unit; costs to 1e-12: a turn of one token at the
# cheapest price is still more than zero, exactly.
PRICE_DIGITS, PRICE_PLACES = 18, 8
COST_DIGITS, COST_PLACES = 28, 12


# Each process reads the console's prices at most this often (accounting.prices.ConsoleRates);
# a price set in the console takes effect at the earliest NOTICE later, so all have it by then.
CACHE_SECONDS = 30.0
NOTICE = timedelta(seconds=60)


def after_notice() -> datetime:
    """The earliest a price set now may take effect."""
    return timezone.now() + NOTICE


class Price(models.Model):
    """What one model's tokens cost from `effective_from` on, until a later price of the same
    model takes over: a change never reprices turns recorded before it, so a price cannot take
    effect in the past, nor sooner than NOTICE after it is set."""

    model = models.CharField(
        max_length=128, help_text="The model's name as runs record it (a run's Model column)."
    )
    input = models.DecimalField(
        max_digits=PRICE_DIGITS, decimal_places=PRICE_PLACES, help_text="Per million prompt tokens."
    )
    output = models.DecimalField(
        max_digits=PRICE_DIGITS,
        decimal_places=PRICE_PLACES,
        help_text="Per million completion tokens.",
    )
    cached_input = models.DecimalField(
        max_digits=PRICE_DIGITS,
        decimal_places=PRICE_PLACES,
        null=True,
        blank=True,
        help_text="Per million cached prompt tokens; empty: as input.",
    )
    currency = models.CharField(max_length=3, default="USD", help_text="ISO 4217, like USD.")
    effective_from = models.DateTimeField(
        default=after_notice,
        help_text="From when it applies: a minute from now at the earliest, since turns recorded "
        "before then are priced already.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ("model", "-effective_from")
        constraints = (
            models.UniqueConstraint(fields=["model", "effective_from"], name="price_once_a_time"),
            models.CheckConstraint(
                condition=models.Q(input__gte=0, output__gte=0)
                & (models.Q(cached_input__isnull=True) | models.Q(cached_input__gte=0)),
                name="price_not_negative",
            ),
        )

    def __str__(self) -> str:
        return (
            f"{self.model}: {self.input}/{self.output} {self.currency} from {self.effective_from}"
        )

    def clean(self) -> None:
        """A new price, or a change to one, takes effect NOTICE from now at the earliest: the
        turns recorded until then were priced by the table as it was."""
        super().clean()
        earliest = timezone.now() + NOTICE - timedelta(seconds=5)  # the form's own seconds
        if self.effective_from is not None and self.effective_from < earliest:
            raise ValidationError(
                {
                    "effective_from": "A price takes effect a minute from now at the earliest: "
                    "turns recorded before then are priced already, and history is not rewritten."
                }
            )


class ChargeKind(models.TextChoices):
    TURN = "turn", "Model turn"  # one reply of the model, its tokens and their cost
    RUN = "run", "Run started"  # a run begun (what a runs quota counts); no tokens, no cost


class Charge(models.Model):
    """One entry of the ledger: a model turn's tokens and cost, or a run's start."""

    kind = models.CharField(max_length=8, choices=ChargeKind.choices, default=ChargeKind.TURN)
    # The person, while their account stands; once it is deleted, `person` holds an anonymous
    # id in its place ("" until then).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    person = models.CharField(max_length=40, blank=True, default="")
    run_id = models.BigIntegerField()
    conversation_id = models.BigIntegerField(null=True, blank=True)
    step = models.PositiveIntegerField(default=0)
    provider = models.CharField(max_length=32, blank=True, default="")
    model = models.CharField(max_length=128, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    # None: the model had no price then ("price unknown", never 0).
    cost = models.DecimalField(
        max_digits=COST_DIGITS, decimal_places=COST_PLACES, null=True, blank=True
    )
    currency = models.CharField(max_length=3, blank=True, default="")
    # The console's Price row that priced it (None: LOOP_PRICES, or no price), by number: a
    # process prices turns from its copy of the table, whose rows another may delete meanwhile.
    price_id = models.BigIntegerField(null=True, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-at",)
        indexes = (
            # A person's spend over a period (quotas, the chat's gauge).
            models.Index(fields=["user", "at"], name="charge_by_person"),
            models.Index(fields=["run_id"], name="charge_by_run"),
            models.Index(
                fields=["conversation_id"],
                condition=models.Q(conversation_id__isnull=False),
                name="charge_by_conversation",
            ),
            models.Index(fields=["at"], name="charge_by_time"),
        )

    def __str__(self) -> str:
        cost = "price unknown" if self.cost is None else f"{self.cost} {self.currency}"
        return f"Run {self.run_id} step {self.step} ({self.kind}): {cost}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


ZERO = Decimal(0)


class Measure(models.TextChoices):
    RUNS = "runs", "Runs started"
    TOKENS = "tokens", "Tokens (prompt and completion)"
    COST = "cost", "Cost (priced turns, in the quota's currency)"


class Period(models.TextChoices):
    DAY = "day", "Day"
    WEEK = "week", "Week"
    MONTH = "month", "Month"


class Window(models.TextChoices):
    CALENDAR = "calendar", "Calendar (the day, week or month under way)"
    ROLLING = "rolling", "Rolling (the last 24 hours, 7 days or 30 days)"


class Quota(models.Model):
    """A cap on a person's use over a period, for one person or every member of a group. It
    adds to the site's quotas (LOOP_QUOTA) and never loosens them: every quota that applies to
    a person is checked, and any one reached refuses (accounting/quotas.py)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="One person; leave empty for a group's quota.",
    )
    group = models.ForeignKey(
        "auth.Group",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Every member of a group; leave empty for one person's quota.",
    )
    measure = models.CharField(max_length=8, choices=Measure.choices)
    limit = models.DecimalField(
        max_digits=PRICE_DIGITS,
        decimal_places=PRICE_PLACES - 2,
        help_text="Runs or tokens: a whole number; cost: an amount.",
    )
    currency = models.CharField(
        max_length=3, default="USD", blank=True, help_text="For a cost quota: ISO 4217, like USD."
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY)
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.CALENDAR)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("group", "user", "measure")
        constraints = (
            models.CheckConstraint(
                condition=models.Q(user__isnull=True, group__isnull=False)
                | models.Q(user__isnull=False, group__isnull=True),
                name="quota_of_a_person_or_a_group",
            ),
            models.CheckConstraint(condition=models.Q(limit__gte=0), name="quota_not_negative"),
        )

    def __str__(self) -> str:
        who = f"group {self.group}" if self.group_id else f"{self.user}"
        return f"{who}: {self.measure} {self.limit}/{self.period} ({self.window})"

    def clean(self) -> None:
        """Runs and tokens are counted whole; a cost is in a currency."""
        fractional = self.limit is not None and self.limit != self.limit.to_integral_value()
        if self.measure != Measure.COST and fractional:
            raise ValidationError({"limit": f"{self.measure} are counted in whole numbers."})
        if self.measure == Measure.COST and len(self.currency) != 3:
            raise ValidationError({"currency": "A cost quota's currency: ISO 4217, like USD."})


class SentInMinute(models.Model):
    """How many messages a person sent in one minute (the send rate, accounting/send_rate.py):
    counted in the database, so every web process counts into the same row."""

    user_id = models.BigIntegerField()
    minute = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["user_id", "minute"], name="sent_once_a_minute"),
        )

    def __str__(self) -> str:
        return f"Person {self.user_id}: {self.count} at {self.minute:%Y-%m-%d %H:%M}"
