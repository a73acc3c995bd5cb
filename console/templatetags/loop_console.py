"""Template helpers for the operators' console pages."""

from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.views.main import ChangeList
from django.utils import timezone
from django.utils.safestring import SafeString

from console import widgets

register = template.Library()


@register.filter
def status_badge(status: str) -> SafeString:
    return widgets.badge(status)


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


@register.inclusion_tag("admin/date_hierarchy.html")
def date_hierarchy_by_id(cl: ChangeList) -> dict[str, Any]:
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
