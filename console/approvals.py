"""The approval pages: the site's policy (which tools ask first, as staff set it over
LOOP_APPROVAL), the audit of every call that asked and what became of it, with the operators'
decisions on waiting calls (deny; approve on a person's behalf, with a permission of its own),
and the tools people allowed for a conversation. Decisions go through approvals/, bound to
each call's digest, as a person's do."""

import json
import re
from collections.abc import Iterable
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agent.toolset import default_registry
from approvals.decisions import DecisionRefused, decide_as_operator, may_decide_for_others
from approvals.models import (
    WAITING,
    ApprovalMode,
    ApprovalRequest,
    SiteToolPolicy,
    ToolGrant,
    Via,
)
from approvals.policy import configured_modes, modes_in_effect, setting_text
from approvals.waiting import CallDecision
from console.widgets import (
    AuditAdmin,
    MalformedFiltersSaid,
    RunUserFilter,
    StepLinks,
    UserFilter,
    badge,
    decision_badge,
    filter_link,
    pretty_json,
    user_link,
)
from core.events import Decision
from workspace.requests import person_of

# The reason the model reads with an operator's denial, after "DENIED: by an operator of this
# site: " (core.approval.denied_text).
OPERATOR_DENIAL = "the call was stopped from the console."
# A run's number as the search box takes it: digits, no more than an id column holds.
RUN_ID = re.compile(r"[0-9]{1,18}")


def tool_names() -> list[str]:
    return list(default_registry().tools)


class ToolFilter(admin.SimpleListFilter):
    """This Loop's tools, known from its registry: no scan of the rows to find them."""

    title = "tool"
    parameter_name = "tool"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(name, name) for name in tool_names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(tool=self.value()) if self.value() else queryset


# The site's policy -------------------------------------------------------------------------------


class SiteToolPolicyForm(forms.ModelForm[SiteToolPolicy]):
    tool = forms.ChoiceField()

    class Meta:
        model = SiteToolPolicy
        fields = ("tool", "mode")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = tool_names()
        if self.instance.tool and self.instance.tool not in names:  # a tool since removed
            names.append(self.instance.tool)
        cast(forms.ChoiceField, self.fields["tool"]).choices = [(name, name) for name in names]
        # The admin draws a help text as HTML.
        self.fields["mode"].help_text = format_html(
            "LOOP_APPROVAL, the site's setting, says <code>{}</code>. A mode set here wins over "
            "it for this tool in the runs started from now on. With “Asks first”, every call "
            "of the tool waits for its person's decision, whatever they chose; with “Runs "
            "without asking”, a person may still ask to decide on their settings page.",
            setting_text(),
        )


class SiteToolPolicyAdmin(MalformedFiltersSaid):
    """Staff set a tool's mode here; LOOP_APPROVAL's modes are shown beside them, read-only."""

    form = SiteToolPolicyForm
    list_display = ("tool", "mode_badge", "from_setting", "updated_at", "updated_by_name")
    list_select_related = ("updated_by",)
    change_list_template = "admin/approvals/sitetoolpolicy/change_list.html"

    @admin.display(description="mode", ordering="mode")
    def mode_badge(self, policy: SiteToolPolicy) -> SafeString:
        return mode_badge(policy.mode)

    @admin.display(description="LOOP_APPROVAL says")
    def from_setting(self, policy: SiteToolPolicy) -> SafeString:
        return mode_badge(configured_modes().get(policy.tool, ""))

    @admin.display(description="set by")
    def updated_by_name(self, policy: SiteToolPolicy) -> SafeString:
        return user_link(policy.updated_by)

    def save_model(
        self, request: HttpRequest, obj: SiteToolPolicy, form: forms.ModelForm[Any], change: bool
    ) -> None:
        obj.updated_by = person_of(request)
        super().save_model(request, obj, form, change)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"modes": modes_in_effect(), "setting": setting_text()}
        return super().changelist_view(request, (extra_context or {}) | context)


def mode_badge(mode: str) -> SafeString:
    if mode == ApprovalMode.ASK:
        return badge("asks first", tone="warn", symbol="✋")
    return badge("runs without asking" if mode else "", tone="quiet", symbol="→")


# The audit of calls that asked ------------------------------------------------------------------


class DecisionFilter(admin.SimpleListFilter):
    """Waiting, or what became of the call."""

    title = "decision"
    parameter_name = "decision"
    WAITING_CHOICE = "waiting"  # the filter's value for calls still waiting

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(self.WAITING_CHOICE, "waiting"), *((d.value, d.value) for d in Decision)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == self.WAITING_CHOICE:
            return queryset.filter(decision=WAITING)
        if self.value() in {decision.value for decision in Decision}:
            return queryset.filter(decision=self.value())
        return queryset


class ApprovalRequestAdmin(StepLinks, AuditAdmin):
    """Read-only, bar the two actions; only a superuser deletes a row, as every audit record
    (and so may delete a run or a person that has them)."""

    list_display = (
        "id",
        "run_page",
        "step_page",
        "tool",
        "decision_badge",
        "person",
        "decided_by_name",
        "decided_at",
        "created_at",
    )
    list_select_related = ("run__user", "decided_by")
    list_filter = (DecisionFilter, ToolFilter, RunUserFilter)
    search_fields = ("tool",)
    date_hierarchy = "created_at"
    ordering = ("-id",)
    actions = ("deny_calls", "approve_calls")
    fields = (
        ("run_page", "step_page", "call_id"),
        ("tool", "why"),
        "digest",
        "arguments_json",
        ("decision_badge", "decided_by_name", "decided_at", "created_at"),
        "decided_through",
        "edited_arguments",
        "reason",
    )
    readonly_fields = (
        "run_page",
        "step_page",
        "decision_badge",
        "decided_by_name",
        "decided_through",
        "arguments_json",
    )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[ApprovalRequest], search_term: str
    ) -> tuple[QuerySet[ApprovalRequest], bool]:
        """A number is a run's (the calls of run 42); anything else a tool's name, or a part."""
        term = search_term.strip()
        if not term:
            return queryset, False
        if RUN_ID.fullmatch(term):
            return queryset.filter(run_id=int(term)), False
        return queryset.filter(tool__icontains=term), False

    @admin.display(description="decision", ordering="decision")
    def decision_badge(self, request_: ApprovalRequest) -> SafeString:
        return decision_badge(request_.decision)

    @admin.display(description="person")
    def person(self, request_: ApprovalRequest) -> SafeString:
        return filter_link(self, request_.run.user)

    @admin.display(description="decided by")
    def decided_by_name(self, request_: ApprovalRequest) -> SafeString:
        if request_.decision and request_.decided_by_id is None:
            return format_html('<span class="loop-none">{}</span>', "nobody (Loop)")
        if request_.decided_via == Via.API:  # a program decided, with the person's key
            return format_html("{} through The API", user_link(request_.decided_by))
        return user_link(request_.decided_by)

    @admin.display(description="decided through", ordering="decided_via")
    def decided_through(self, request_: ApprovalRequest) -> SafeString:
        """Where the decision was made; through the API, with which key (its prefix and
        name, as the decision recorded them)."""
        if not request_.decided_via:
            return format_html('<span class="loop-none">{}</span>', "—")
        where = request_.get_decided_via_display()
        if not request_.decided_key:
            return format_html("{}", where)
        return format_html("{}, key <code>{}</code>", where, request_.decided_key)

    @admin.display(description="arguments as the model proposed them")
    def arguments_json(self, request_: ApprovalRequest) -> SafeString:
        return pretty_json(parsed_or_text(request_.arguments))

    def has_deny_permission(self, request: HttpRequest) -> bool:
        return may_decide_for_others(person_of(request), Decision.DENY)

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return may_decide_for_others(person_of(request), Decision.APPROVE)

    @admin.action(description="Deny the selected waiting calls", permissions=["deny"])
    def deny_calls(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> None:
        self.decide(request, queryset, Decision.DENY)

    @admin.action(description="Approve on the person's behalf", permissions=["approve"])
    def approve_calls(self, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> None:
        self.decide(request, queryset, Decision.APPROVE)

    def decide(
        self, request: HttpRequest, queryset: QuerySet[ApprovalRequest], decision: Decision
    ) -> None:
        """The selected calls that still wait, decided run by run (a run whose calls are all
        decided goes back to the queue); a run that refuses says why, by its number."""
        waiting = list(queryset.filter(decision=WAITING).order_by("run_id", "pk"))
        skipped = queryset.count() - len(waiting)
        decided = 0
        for run_id, calls in by_run(waiting).items():
            decisions = [
                CallDecision(
                    call.call_id,
                    decision,
                    call.digest,
                    reason=OPERATOR_DENIAL if decision is Decision.DENY else "",
                )
                for call in calls
            ]
            try:
                done = decide_as_operator(person_of(request), run_id, decisions)
            except (DecisionRefused, PermissionDenied) as refused:
                self.message_user(request, f"Run {run_id}: {refused}", messages.WARNING)
                continue
            for call in done:
                self.log_change(request, call, f"{decision.value} on the person's behalf.")
            decided += len(done)
        said = "Denied" if decision is Decision.DENY else "Approved"
        message = f"{said} {decided} call{'s' if decided != 1 else ''}."
        if skipped:
            message += f" {skipped} had been decided already and stay as they were."
        self.message_user(request, message, messages.SUCCESS if decided else messages.WARNING)


def by_run(calls: Iterable[ApprovalRequest]) -> dict[int, list[ApprovalRequest]]:
    runs: dict[int, list[ApprovalRequest]] = {}
    for call in calls:
        runs.setdefault(call.run_id, []).append(call)
    return runs


def parsed_or_text(arguments: str) -> object:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


# The tools people allowed -----------------------------------------------------------------------


class LiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("live", "allowed"), ("revoked", "revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("live", "revoked"):
            return queryset.filter(revoked_at__isnull=self.value() == "live")
        return queryset


class OwnerFilter(UserFilter):
    path = "conversation__owner"


class ToolGrantAdmin(AuditAdmin):
    """Read-only: a person grants in their conversation, and revokes on their settings page;
    only a superuser deletes one, as every audit record."""

    list_display = (
        "id",
        "tool",
        "conversation_name",
        "owner",
        "granted_at",
        "granted_by_name",
        "revoked_at",
    )
    list_select_related = ("conversation__owner", "granted_by")
    list_filter = (LiveFilter, ToolFilter, OwnerFilter)
    date_hierarchy = "granted_at"
    ordering = ("-id",)
    fields = (
        ("tool", "conversation_name", "owner"),
        ("granted_at", "granted_by_name", "revoked_at"),
    )
    readonly_fields = ("conversation_name", "owner", "granted_by_name")

    @admin.display(description="conversation")
    def conversation_name(self, grant: ToolGrant) -> str:
        conversation = grant.conversation
        return f"{conversation.title or 'Untitled'} (#{conversation.pk})"

    @admin.display(description="person")
    def owner(self, grant: ToolGrant) -> SafeString:
        return filter_link(self, grant.conversation.owner)

    @admin.display(description="granted by")
    def granted_by_name(self, grant: ToolGrant) -> SafeString:
        return user_link(grant.granted_by)
