"""Start-up checks: LOOP_PRICES must read as a price table, or nothing is priced right, and
LOOP_QUOTA as quotas, or nobody is held to them."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured

from accounting.prices import configured_rates
from accounting.quotas import SYNTAX, parse_quota


@register("accounting")
def prices_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        configured_rates()
    except ImproperlyConfigured as error:
        return [
            Error(
                str(error),
                hint='LOOP_PRICES is JSON: {"<model>": {"input": 0.15, "output": 0.6, '
                '"cached_input": 0.075, "currency": "USD", "effective_from": "2026-01-01"}}, '
                "prices per million tokens.",
                id="accounting.E001",
            )
        ]
    return []


@register("accounting")
def quota_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        parse_quota(settings.LOOP_QUOTA)
    except ImproperlyConfigured as error:
        return [Error(str(error), hint=SYNTAX, id="accounting.E002")]
    return []
