"""The start-up check of the approval setting, LOOP_APPROVAL."""

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from agent.toolset import default_registry
from approvals.policy import configured_modes


@register("approvals")
def check_approval_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """LOOP_APPROVAL reads as tool=ask|auto pairs (else every run would fail at its first tool
    call), and names tools this Loop has (a misspelt tool would silently never ask)."""
    try:
        modes = configured_modes()
    except ImproperlyConfigured as error:
        return [Error(str(error), id="agent.E010")]
    known = default_registry().tools
    return [
        Warning(
            f"LOOP_APPROVAL names {tool!r}, which is not a tool of this Loop "
            f"({', '.join(sorted(known))}): it never asks.",
            id="agent.W010",
        )
        for tool in modes
        if tool not in known
    ]
