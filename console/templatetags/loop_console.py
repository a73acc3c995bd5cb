"""Template helpers for the operators' console pages."""

from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.views.main import ChangeList
from django.utils import timezone
from django.utils.safestring import SafeString

from console import widgets
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)

register = template.Library()


@register.filter
def run_badge(status: str) -> SafeString:
    return widgets.run_badge(status)


@register.filter
def tool_badge(status: str) -> SafeString:
    return widgets.tool_badge(status)


@register.filter
def halt_badge(reason: str) -> SafeString:
    return widgets.halt_badge(reason)


@register.filter
def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


@register.filter
def words(name: str) -> str:
    return name.replace("_", " ")


@register.filter
def pretty_json(value: object) -> SafeString:
    return widgets.pretty_json(value)


@register.filter
def decision_badge(decision: str) -> SafeString:
    return widgets.decision_badge(decision)


# The partial of admin/agent/agentrun/timeline.html that draws each class of event.
TIMELINE_PARTIALS: dict[type, str] = {
    RunStarted: "run_started",
    MemoriesRecalled: "memories_recalled",
    ModelReplied: "model_replied",
    ToolCallStarted: "tool_call_started",
    ToolCallFinished: "tool_call_finished",
    BreakerTripped: "breaker_tripped",
    RunHalted: "run_halted",
    RunFinished: "run_finished",
    RunResumed: "run_resumed",
    PersonSaid: "person_said",
    ApprovalRequested: "approval_requested",
    ApprovalDecided: "approval_decided",
}
TIMELINE = "admin/agent/agentrun/timeline.html"


@register.filter
def timeline_partial(event: object) -> str:
    """Which partial draws `event` on a run's timeline: an event without one of its own (or one
    this version cannot read) is shown as stored."""
    return f"{TIMELINE}#{TIMELINE_PARTIALS.get(type(event), 'as_stored')}"


@register.inclusion_tag("admin/date_hierarchy.html")
def date_hierarchy_by_id(cl: ChangeList) -> dict[str, Any] | None:
    """Django's date hierarchy, except its first level: the years from the first row to the last
    by id, two index lookups, where Django scans every row twice (for the range, then for the
    years). The console's dates are all creation times of append-only rows, so ids follow them."""
    field = cl.date_hierarchy
    if any(key.startswith(f"{field}__") for key in cl.params):
        return date_hierarchy(cl)
    ends = [cl.queryset.order_by(o).values_list(field, flat=True).first() for o in ("pk", "-pk")]
    if None in ends:
        return date_hierarchy(cl)
    first, last = (timezone.localtime(end) for end in ends)
    if first.year == last.year:  # Django opens the only year, or month, at once
        return date_hierarchy(cl)
    return {
        "show": True,
        "choices": [
            {
                "link": cl.get_query_string({f"{field}__year": str(year)}, [f"{field}__"]),
                "title": str(year),
            }
            for year in range(first.year, last.year + 1)
        ],
    }
