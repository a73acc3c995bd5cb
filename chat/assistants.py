"""A person's Assistants page (/assistants/): the assistants they may use (their own, those a
group of theirs shares, the site's), making and editing their own, archiving them, and starting
a conversation with one; and what the chat shows of the assistant a conversation is started
with (the composer's picker and "/" list, the header's name). Thin adapters over
assistants.versions and assistants.forms: another person's assistant, unless shared with the
person, is 404 here, as one that never was."""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agent.llm.factory import offered_models
from agent.models import AgentRun, Conversation
from agent.runs import AssistantUnavailable
from assistants.forms import AssistantForm
from assistants.models import Assistant
from assistants.versions import assistants_for, set_archived, sharing_allowed, shown_to, usable_by
from rights.effective import rights_of
from workspace.query_string import query_text
from workspace.requests import SignedInRequest


def model_choices(request: SignedInRequest) -> list[tuple[str, str]]:
    """The models the person may pick, as the chat offers them."""
    return [
        (choice.name, f"{choice.model} · {choice.provider}")
        for choice in offered_models(rights_of(request.user))
    ]


def own(request: SignedInRequest, assistant_id: int) -> Assistant:
    """The person's own assistant (archived too); anyone else's is 404."""
    assistant = Assistant.objects.filter(owner=request.user, pk=assistant_id).first()
    if assistant is None:
        raise Http404("No such assistant of yours.")
    return assistant


@require_GET
def assistants(request: SignedInRequest) -> HttpResponse:
    """Their own (archived last), then the others they may use, each with how it is shared."""
    shown = shown_to(request.user).select_related("owner").prefetch_related("groups")
    mine = [assistant for assistant in shown if assistant.owner_id == request.user.pk]
    others = [assistant for assistant in shown if assistant.owner_id != request.user.pk]
    runs = AgentRun.objects.filter(user=request.user, assistant_version__assistant__in=mine)
    context = {
        "mine": sorted(mine, key=lambda assistant: assistant.archived_at is not None),
        "others": others,
        "used": set(runs.values_list("assistant_version__assistant", flat=True)),
    }
    return render(request, "chat/assistants.html", context)


@require_http_methods(["GET", "POST"])
def edit(request: SignedInRequest, assistant_id: int | None = None) -> HttpResponse:
    """Make an assistant (no id) or edit one of the person's own: every save is a new version,
    so the runs started before it keep what they were started with."""
    assistant = own(request, assistant_id) if assistant_id is not None else None
    data = request.POST if request.method == "POST" else None
    form = AssistantForm(data, instance=assistant, user=request.user, models=model_choices(request))
    if data is not None and form.is_valid():
        saved = form.save()
        messages.success(
            request,
            f"Saved {saved.name} (version {saved.version}). New conversations and turns with it "
            "use this version; past runs keep theirs.",
        )
        return redirect("assistants")
    context = {"form": form, "assistant": assistant, "sharing": sharing_allowed()}
    status = 400 if data is not None else 200
    return render(request, "chat/assistant_form.html", context, status=status)


@require_POST
def archive(request: SignedInRequest, assistant_id: int) -> HttpResponse:
    """Archive one of the person's own (or bring it back, `restore`): archived, no new
    conversation or turn may use it; it is never deleted, as runs name its versions."""
    assistant = own(request, assistant_id)
    restore = bool(request.POST.get("restore"))
    set_archived(assistant, not restore)
    said = "is back" if restore else "is archived: conversations with it take no new turns"
    messages.success(request, f"{assistant.name} {said}.")
    return redirect("assistants")


def picker_context(request: SignedInRequest, conversation: Conversation | None) -> dict[str, Any]:
    """What the chat shows of assistants: for a new conversation, the ones the person may pick
    (and the one `?assistant=` preselects, from "Start a conversation"); for a conversation, its
    assistant, and whether it is still theirs to use."""
    if conversation is not None:
        assistant = conversation.assistant
        usable = assistant is not None and usable_by(request.user, assistant.pk) is not None
        return {"conversation_assistant": assistant, "assistant_usable": usable}
    picked = query_text(request, "assistant", 20) or request.POST.get("assistant", "")
    offered = list(assistants_for(request.user).only("pk", "name", "description"))
    chosen = next((a for a in offered if str(a.pk) == str(picked)), None)
    return {"assistants": offered, "assistant_picked": chosen}


def assistant_picked(request: SignedInRequest) -> Assistant | None:
    """The assistant a new conversation's first send names, if any; a forged one (not among
    those the person may use) is refused: the caller says so and stores nothing."""
    picked = request.POST.get("assistant", "")
    if not picked:
        return None
    assistant = usable_by(request.user, picked)
    if assistant is None:
        raise AssistantUnavailable(UNKNOWN)
    return assistant


UNKNOWN = (
    "That assistant is not one you may use (archived, no longer shared with you, or never "
    "yours), so nothing was sent. Pick another, or none."
)
