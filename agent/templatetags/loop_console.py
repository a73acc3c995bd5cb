"""Template helpers for the operators' console pages."""

from django import template
from django.contrib.auth import get_user_model
from django.utils.safestring import SafeString

from agent import console
from agent.admin import WAITING_FOR_APPROVAL

register = template.Library()


@register.filter
def status_badge(status: str) -> SafeString:
    return console.badge(status)


@register.filter
def halt_badge(reason: str) -> SafeString:
    return console.halt_badge(reason)


@register.filter
def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


@register.filter
def words(name: str) -> str:
    return name.replace("_", " ")


@register.filter
def pretty_json(value: object) -> SafeString:
    return console.pretty_json(value)


@register.simple_tag
def waiting_for_approval() -> int:
    return get_user_model().objects.filter(WAITING_FOR_APPROVAL).count()
