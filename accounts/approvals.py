"""A person's approval settings (/settings/approvals/): which tool calls wait for their decision
on top of what the site requires (approvals.policy reads them), and the tools they allowed for a
whole conversation, each revocable. A person may ask for more than the site, never for less: a
choice the site requires is shown checked and cannot be unchecked, and a POST that unchecks it
changes nothing."""

from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from agent.selectors import conversations_for
from agent.toolset import default_registry
from approvals.models import ApprovalPreference, ToolGrant
from approvals.policy import (
    RUN_CODE,
    WRITE_FILE,
    Modes,
    preference_of,
    revoke_grant,
    site_asks,
    site_modes,
)
from core.llm import TOOL_NAME_CHARS

# Each choice a person makes, and the tools it asks about (None: every tool).
CHOICES: dict[str, tuple[str, str | None]] = {
    "ask_run_code": ("Ask me before running code", RUN_CODE),
    "ask_write_file": ("Ask me before writing files", WRITE_FILE),
    "ask_any_tool": ("Ask me before any tool", None),
}
SITE_REQUIRES = "The site requires it: every such call waits for your decision."


def site_required(modes: Modes) -> set[str]:
    """The choices the site makes for everyone: a tool it asks about, or, for "any tool", every
    tool of this Loop."""
    tools = default_registry().tools
    return {
        choice
        for choice, (_, tool) in CHOICES.items()
        if (site_asks(tool, modes) if tool else all(site_asks(name, modes) for name in tools))
    }


class ApprovalChoicesForm(forms.Form):
    """The person's choices; those the site requires are disabled, so Django takes them from the
    page's own (checked) value whatever is posted."""

    def __init__(
        self, data: QueryDict | None, *, preference: ApprovalPreference, required: set[str]
    ) -> None:
        initial = {name: getattr(preference, name) or name in required for name in CHOICES}
        super().__init__(data, initial=initial)
        for name, (label, _) in CHOICES.items():
            self.fields[name] = forms.BooleanField(
                required=False,
                label=label,
                disabled=name in required,
                help_text=SITE_REQUIRES if name in required else "",
            )


def save_choices(
    user: AbstractBaseUser, chosen: dict[str, bool], required: set[str]
) -> ApprovalPreference:
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


def live_grants(user: AbstractBaseUser, modes: Modes) -> list[LiveGrant]:
    """The person's unrevoked grants in their conversations, newest conversation first: one
    query."""
    grants = (
        ToolGrant.objects.filter(conversation__in=conversations_for(user), revoked_at__isnull=True)
        .select_related("conversation")
        .order_by("-conversation__updated_at", "conversation_id", "tool")
    )
    return [LiveGrant(grant, site_asks(grant.tool, modes)) for grant in grants]


@require_http_methods(["GET", "POST"])
def approval_settings(request: HttpRequest) -> HttpResponse:
    modes = site_modes()
    required = site_required(modes)
    preference = preference_of(request.user)
    # Bound on any POST: one that unchecks every box posts no choice at all.
    posted = request.POST if request.method == "POST" else None
    form = ApprovalChoicesForm(posted, preference=preference, required=required)
    if request.method == "POST" and form.is_valid():
        save_choices(request.user, form.cleaned_data, required)
        messages.success(request, "Saved: the runs you start from now on follow these choices.")
        return redirect("approval_settings")
    context = {"form": form, "grants": live_grants(request.user, modes)}
    return render(request, "accounts/approvals.html", context)


class RevokeForm(forms.Form):
    conversation = forms.IntegerField(min_value=1, max_value=2**63 - 1)  # a bigint id
    tool = forms.CharField(max_length=TOOL_NAME_CHARS)


@require_POST
def revoke(request: HttpRequest) -> HttpResponse:
    """Ends one of the person's own grants; another person's grant, or one already revoked, does
    not exist here."""
    form = RevokeForm(request.POST)
    if not form.is_valid():
        raise Http404("No such grant.")
    conversation, tool = form.cleaned_data["conversation"], form.cleaned_data["tool"]
    if not revoke_grant(request.user, conversation, tool):
        raise Http404("No such grant.")
    messages.success(request, f"Revoked: {tool} calls in that conversation ask you again.")
    return redirect("approval_settings")
