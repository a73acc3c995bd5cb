"""The tool execution pages: every tool call a run made, read-only, linked to its run and step."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from agent.models import ToolExecution
from console.widgets import AuditAdmin, RunUserFilter, StepLinks, filter_link, tool_badge
from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.unisolated import SubprocessSandbox


class PolicyFilter(admin.SimpleListFilter):
    """The sandbox policies run_code can use, known from the sandboxes themselves: no scan of
    the executions to find them."""

    title = "sandbox policy"
    parameter_name = "policy"
    NONE = "none"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        policies = (BubblewrapSandbox.policy, SubprocessSandbox.policy)
        return [*((policy, policy) for policy in policies), (self.NONE, "none (not sandboxed)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is None:
            return queryset
        return queryset.filter(policy="" if self.value() == self.NONE else self.value())


class ToolExecutionAdmin(StepLinks, AuditAdmin):
    list_display = (
        "id",
        "run_page",
        "step_page",
        "tool",
        "status_badge",
        "policy",
        "duration_ms",
        "user_name",
        "created_at",
    )
    list_select_related = ("run__user",)
    list_filter = ("tool", "status", PolicyFilter, RunUserFilter)
    date_hierarchy = "created_at"
    search_fields = ("arguments", "result", "error")
    ordering = ("-id",)
    fields = (
        ("run_page", "step_page", "call_id"),
        ("tool", "status_badge", "policy"),
        ("duration_ms", "truncated", "created_at", "pruned_at"),
        "arguments",
        "result",
        "error",
    )
    readonly_fields = ("run_page", "step_page", "status_badge", "duration_ms")

    @admin.display(description="status", ordering="status")
    def status_badge(self, execution: ToolExecution) -> SafeString:
        return tool_badge(execution.status)

    @admin.display(description="duration", ordering="duration")
    def duration_ms(self, execution: ToolExecution) -> str:
        return f"{execution.duration * 1000:.0f} ms"

    @admin.display(description="user")
    def user_name(self, execution: ToolExecution) -> SafeString:
        return filter_link(self, execution.run.user)
