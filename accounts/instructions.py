"""A person's instructions (/settings/instructions/): how Loop's runs should answer them, put in the
system prompt of every run they start, as their preferences (core.instructions)."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agent.instructions import InstructionsForm, personal_instructions_of, set_personal_instructions
from core.instructions import INSTRUCTIONS_CHARS
from workspace.requests import SignedInRequest


@require_http_methods(["GET", "POST"])
def instruction_settings(request: SignedInRequest) -> HttpResponse:
    if request.method == "POST":
        form = InstructionsForm(request.POST)
        if form.is_valid():
            set_personal_instructions(request.user, form.cleaned_data["instructions"])
            messages.success(request, "Saved: the tasks you start from now on follow them.")
            return redirect("instruction_settings")
        status = 400
    else:
        form = InstructionsForm(initial={"instructions": personal_instructions_of(request.user)})
        status = 200
    context = {"form": form, "limit": INSTRUCTIONS_CHARS}
    return render(request, "accounts/instructions.html", context, status=status)
