"""A person's own approval choices, on top of what the site requires (the policy reads them),
and the tools they allowed for a whole conversation, as their settings page reads and changes
them. A person may ask for more than the site, never for less: a choice the site requires keeps
what the person had, which applies again once the site stops requiring it."""

from dataclasses import dataclass

from django.contrib.auth.models import User

from agent.selectors import conversations_for
from agent.toolset import default_registry
from approvals.models import ApprovalPreference, ToolGrant
from approvals.policy import RUN_CODE, WRITE_FILE, Modes, site_asks

# Each choice a person makes, and the tools it asks about (None: every tool).
CHOICES: dict[str, tuple[str, str | None]] = {
    "ask_run_code": ("Ask me before running code", RUN_CODE),
    "ask_write_file": ("Ask me before writing files", WRITE_FILE),
    "ask_any_tool": ("Ask me before any tool", None),
}


def site_required(modes: Modes) -> set[str]:
    """The choices the site makes for everyone: a tool it asks about, or, for "any tool", every
    tool of this Loop."""
    tools = default_registry().tools
    return {
        choice
        for choice, (_, tool) in CHOICES.items()
        if (site_asks(tool, modes) if tool else all(site_asks(name, modes) for name in tools))
    }


def save_choices(user: User, chosen: dict[str, bool], required: set[str]) -> ApprovalPreference:
    """The person's choices stored, less those the site requires: those keep what the person
    had, which applies again if the site stops requiring it."""
    mine = {name: bool(chosen.get(name)) for name in CHOICES if name not in required}
    preference, _ = ApprovalPreference.objects.update_or_create(user=user, defaults=mine)
    return preference


@dataclass(frozen=True)
class LiveGrant:
    """An "always allow" the person gave in one conversation, and whether the site asks about
    that tool anyway (then the grant has no effect while it does)."""

    grant: ToolGrant
    site_asks: bool


def live_grants(user: User, modes: Modes) -> list[LiveGrant]:
    """The person's unrevoked grants in their conversations, newest conversation first: one
    query."""
    grants = (
        ToolGrant.objects.filter(conversation__in=conversations_for(user), revoked_at__isnull=True)
        .select_related("conversation")
        .order_by("-conversation__updated_at", "conversation_id", "tool")
    )
    return [LiveGrant(grant, site_asks(grant.tool, modes)) for grant in grants]
