"""Template helpers for the people's part of the operators' console."""

from django import template
from django.contrib.auth import get_user_model

from accounts.models import WAITING_FOR_APPROVAL

register = template.Library()


@register.simple_tag
def waiting_for_approval() -> int:
    return get_user_model().objects.filter(WAITING_FOR_APPROVAL).count()
