"""The pieces every page of the operators' console shares: status badges (colour and symbol
together, never colour alone), links between records, the read-only audit admin, the user filter."""

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.views.main import ERROR_FLAG
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agent.models import AgentRun
from core.events import BREAKER_REASONS, Decision, RunStatus
from core.results import ToolStatus
from core.wording import RUN_SYMBOLS, TOOL_SYMBOLS

# Badge colours by family: what went well, what a guard or a person stopped, what broke. The
# symbols are the ones the chat shows (core/wording.py), so a symbol means one thing to all.
# Keyed by the status as a row stores it (a str: a StrEnum member is its value).
RUN_TONES: dict[str, str] = {
    RunStatus.SUCCEEDED: "good",
    RunStatus.RUNNING: "live",
    RunStatus.AWAITING_APPROVAL: "warn",
    RunStatus.QUEUED: "quiet",
    RunStatus.CANCELLED: "quiet",
    RunStatus.HALTED: "warn",
    RunStatus.INTERRUPTED: "warn",
    RunStatus.FAILED: "bad",
}
TOOL_TONES: dict[str, str] = {
    ToolStatus.OK: "good",
    ToolStatus.SKIPPED: "quiet",
    ToolStatus.INTERRUPTED: "warn",
    ToolStatus.TIMEOUT: "bad",
    ToolStatus.DENIED: "bad",
    ToolStatus.ERROR: "bad",
}
# What became of a call that asked its person ("" while it waits): tone, symbol, words.
DECISION_BADGES = {
    "": ("live", "…", "waiting"),
    Decision.APPROVE: ("good", "✓", Decision.APPROVE),
    Decision.EDIT: ("good", "✎", Decision.EDIT),
    Decision.DENY: ("bad", "⛔", Decision.DENY),
    Decision.EXPIRED: ("warn", "⧗", Decision.EXPIRED),
    Decision.CANCELLED: ("quiet", "■", Decision.CANCELLED),
}
RUN_SYMBOL_OF: dict[str, str] = dict(RUN_SYMBOLS.items())
TOOL_SYMBOL_OF: dict[str, str] = dict(TOOL_SYMBOLS.items())
QUIET_TONE = "quiet"
UNKNOWN_SYMBOL = "•"  # a status this version does not know (a later Loop's)
BREAKER_TONE = "bad"
BREAKER_SYMBOL = "⚡"
GUARD_TONE = "warn"
GUARD_SYMBOL = "⚠"


def badge(value: str, *, tone: str, symbol: str) -> SafeString:
    """A value as a badge: colour and symbol together, never colour alone; "—" when empty."""
    if not value:
        return format_html('<span class="loop-none">{}</span>', "—")
    return format_html(
        '<span class="loop-badge loop-{}">{} {}</span>', tone, symbol, value.replace("_", " ")
    )


def run_badge(status: str) -> SafeString:
    return badge(
        status,
        tone=RUN_TONES.get(status, QUIET_TONE),
        symbol=RUN_SYMBOL_OF.get(status, UNKNOWN_SYMBOL),
    )


def tool_badge(status: str) -> SafeString:
    return badge(
        status,
        tone=TOOL_TONES.get(status, QUIET_TONE),
        symbol=TOOL_SYMBOL_OF.get(status, UNKNOWN_SYMBOL),
    )


def decision_badge(decision: str) -> SafeString:
    tone, symbol, words = DECISION_BADGES.get(decision, (QUIET_TONE, UNKNOWN_SYMBOL, decision))
    return badge(words, tone=tone, symbol=symbol)


def halt_badge(reason: str) -> SafeString:
    if reason in BREAKER_REASONS:
        return badge(reason, tone=BREAKER_TONE, symbol=BREAKER_SYMBOL)
    return badge(reason, tone=GUARD_TONE, symbol=GUARD_SYMBOL)


def change_url(
    obj: Model | None = None, *, model: type[Model] | None = None, pk: Any = None
) -> str:
    if obj is not None:
        model, pk = type(obj), pk or obj.pk
    if model is None:
        raise TypeError("change_url takes an object, or a model and a primary key.")
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])


def list_url(model: type[Model], **filters: Any) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    if filters:
        url += "?" + "&".join(f"{name}={value}" for name, value in filters.items())
    return url


def pretty_json(value: object) -> SafeString:
    return format_html('<pre class="loop-json">{}</pre>', json.dumps(value, indent=2))


def link(url: str, text: object) -> SafeString:
    return format_html('<a href="{}">{}</a>', url, text)


def run_link(run_id: int | None, step: int | None = None) -> SafeString:
    """A link to a run's page, at a step of its timeline when given."""
    if run_id is None:
        return format_html('<span class="loop-none">{}</span>', "—")
    url = change_url(model=AgentRun, pk=run_id)
    if step is None:
        return link(url, f"run {run_id}")
    return link(f"{url}#step-{step}", f"step {step}")


def user_link(user: AbstractBaseUser | None) -> SafeString:
    if user is None:
        return format_html('<span class="loop-none">{}</span>', "—")
    return link(change_url(user), user.get_username())


class EstimatedCountPaginator(Paginator[Model]):
    """An unfiltered list of a table this large shows PostgreSQL's estimate of its rows:
    counting a million rows exactly takes longer than the rest of the page. A filtered list,
    or a smaller table, is counted exactly."""

    EXACT_BELOW = 100_000

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if isinstance(rows, QuerySet) and not rows.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [rows.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] >= self.EXACT_BELOW:
                return int(row[0])
        return super().count


IGNORED_FILTERS = (
    "Ignored the filters in the address: one of them does not fit this list (a malformed id, "
    "year or date, or a field the list does not have), so the whole list is shown."
)


class MalformedFiltersSaid(admin.ModelAdmin[Any]):
    """Django answers a filter that does not fit a list (`?run__id__exact=abc`, a field the list
    does not have) by redirecting to the whole list with `?e=1`: say there what happened. A
    lookup Django refuses outright (from 5.2.20, a relation the list does not filter on, such as
    the Group list's `?user=`) is answered the same way rather than with a 400: the whole list,
    which the operator may see anyway, and nothing the refused lookup would have told."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if ERROR_FLAG in request.GET:
            messages.warning(request, IGNORED_FILTERS)
        try:
            return super().changelist_view(request, extra_context)
        except DisallowedModelAdminLookup:
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")


class AuditAdmin(MalformedFiltersSaid):
    """Audit records are never added or edited through the admin, whatever is posted; only a
    superuser deletes them. The count of all rows is skipped: tables grow to millions."""

    show_full_result_count = False
    list_per_page = 50
    paginator = EstimatedCountPaginator

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.is_active and request.user.is_superuser


class UserFilter(admin.SimpleListFilter):
    """Filter by user: `?user=<id>`, which every user name in a list links to, and which a
    user's own page links to. Listing every user here would cost a query and a link per user on
    every page; at thousands of users that is most of the page."""

    title = "user (click a name in the list)"
    parameter_name = "user"
    path = "user"  # where the user is, from the listed model

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        chosen = user_id(self.value())
        if chosen is None:
            return []
        name = get_user_model().objects.filter(pk=chosen).values_list("username", flat=True)
        return [(str(chosen), name.first() or f"user {chosen}")]

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        chosen = user_id(self.value())
        if chosen is None:
            messages.warning(
                request, f"Ignored the user filter: {self.value()!r} is not a user id."
            )
            return queryset
        return queryset.filter(**{self.path: chosen})


def user_id(value: str | None) -> int | None:
    """`value` as a user id, or None when it cannot be one: only ASCII digits, within the range
    of the id column (a larger number would reach the database and fail there)."""
    if not value or not value.isascii() or not value.isdigit():
        return None
    pk = get_user_model()._meta.pk
    _, largest = connection.ops.integer_field_range(pk.get_internal_type())
    return int(value) if int(value) <= largest else None


def filter_link(model_admin: admin.ModelAdmin[Any], user: AbstractBaseUser) -> SafeString:
    """A user's name that filters the list it is in down to that user's rows."""
    return link(list_url(model_admin.model, user=user.pk), user.get_username())


class RunUserFilter(UserFilter):
    """The user filter of a record that belongs to a run."""

    path = "run__user"


class StepLinks:
    """The `run_page` and `step_page` columns of a record made at one step of a run."""

    @admin.display(description="run", ordering="run_id")
    def run_page(self, record: Any) -> SafeString:
        return run_link(record.run_id)

    @admin.display(description="step", ordering="step")
    def step_page(self, record: Any) -> SafeString:
        return run_link(record.run_id, record.step)
