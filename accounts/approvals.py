"""A person's approval settings (/settings/approvals/): which tool calls wait for their decision
on top of what the site requires (approvals.policy reads them), and the tools they allowed for a
whole conversation, each revocable. A person may ask for more than the site, never for less: a
choice the site requires is shown checked and cannot be unchecked, and a POST that unchecks it
changes nothing."""

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from approvals.choices import CHOICES, live_grants, save_choices, site_required
from approvals.models import ApprovalPreference
from approvals.policy import preference_of, revoke_grant, site_modes
from core.llm import TOOL_NAME_CHARS
from workspace.requests import SignedInRequest

SITE_REQUIRES = "The site requires it: every such call waits for your decision."


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


@require_http_methods(["GET", "POST"])
def approval_settings(request: SignedInRequest) -> HttpResponse:
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
def revoke(request: SignedInRequest) -> HttpResponse:
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
