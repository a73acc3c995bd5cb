"""An assistant's versions: each save snapshots it, and what a run of it may use is read from the
snapshot it was started with, never from the assistant as it stands."""

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from assistants.models import Assistant, AssistantVersion
from rights.effective import Rights


def snapshot_of(assistant: Assistant) -> dict[str, Any]:
    """The assistant's fields as a run reads them (its many-to-many saved already)."""
    servers = sorted(assistant.mcp_servers.values_list("pk", flat=True))
    return {
        "id": assistant.pk,
        "name": assistant.name,
        "description": assistant.description,
        "instructions": assistant.instructions,
        "model": assistant.model,
        "tools": None if assistant.all_tools else sorted(assistant.tool_names),
        "mcp_servers": None if assistant.all_mcp_servers else servers,
        "ask": sorted(assistant.ask_before),
        "use_memory": assistant.use_memory,
    }


def new_version(assistant: Assistant, by: User | None = None) -> AssistantVersion:
    """Record the assistant as it stands now (after a save of it and its many-to-many) as its
    next version."""
    with transaction.atomic():
        Assistant.objects.filter(pk=assistant.pk).update(version=F("version") + 1)
        assistant.refresh_from_db(fields=["version"])
        return AssistantVersion.objects.create(
            assistant=assistant,
            number=assistant.version,
            snapshot=snapshot_of(assistant),
            created_by=by,
        )


def latest_version(assistant: Assistant) -> AssistantVersion:
    """The version a run started now gets (made if the assistant has none yet)."""
    found = assistant.versions.order_by("-number").first()
    return found or new_version(assistant)


def rights_of_version(snapshot: dict[str, Any]) -> Rights:
    """What a run of the assistant may use, by its snapshot (before the person's own rights)."""
    tools, servers = snapshot.get("tools"), snapshot.get("mcp_servers")
    model = snapshot.get("model") or ""
    return Rights(
        models=frozenset({model}) if model else None,
        tools=None if tools is None else frozenset(tools),
        mcp_servers=None if servers is None else frozenset(servers),
        ask=frozenset(snapshot.get("ask") or ()),
        memory=bool(snapshot.get("use_memory", True)),
    )


GROUPS = "groups"


def sharing_allowed() -> bool:
    """Whether a person may share an assistant of theirs with a group of theirs
    (LOOP_ASSISTANT_SHARING); staff share site assistants either way."""
    return bool(settings.LOOP_ASSISTANT_SHARING == GROUPS)


def assistants_for(user: User) -> QuerySet[Assistant]:
    """The assistants `user` may start a conversation with: their own, the site's shared with
    everyone or a group of theirs, and (while the site allows sharing) others' shared with a
    group of theirs; none archived. The one answer the chat, the API, `runagent` and a new turn
    of a conversation (agent.runs) ask."""
    if not user.is_authenticated:
        return Assistant.objects.none()
    theirs = Q(groups__in=user.groups.all())
    site = Q(owner__isnull=True) & (Q(everyone=True) | theirs)
    visible = Q(owner=user) | site
    if sharing_allowed():
        visible |= Q(owner__isnull=False) & theirs
    return Assistant.objects.filter(visible, archived_at__isnull=True).distinct()


def shown_to(user: User) -> QuerySet[Assistant]:
    """The assistants a person's Assistants page lists: those they may use, and their own
    archived ones (to see, or bring back). Any other is 404 to them."""
    usable = assistants_for(user).values("pk")
    return Assistant.objects.filter(Q(pk__in=usable) | Q(owner=user)).distinct()


def usable_by(user: User, assistant_id: object) -> Assistant | None:
    """The assistant `assistant_id` names, if `user` may start a conversation with it: a forged
    or stale id (another person's, archived, no longer shared, not a number) is None."""
    try:
        pk = int(str(assistant_id))
    except ValueError:
        return None
    return assistants_for(user).filter(pk=pk).first()


def find_for(user: User, name_or_id: str) -> Assistant | None:
    """An assistant of `user`'s by its id or, failing that, its name (runagent --assistant):
    their own first, then the others they may use."""
    if (by_id := usable_by(user, name_or_id)) is not None:
        return by_id
    named = assistants_for(user).filter(name__iexact=name_or_id.strip())
    return named.filter(owner=user).first() or named.order_by("pk").first()


def set_archived(assistant: Assistant, archived: bool) -> None:
    """Archive (no new conversation or turn may use it) or bring back an assistant. It is never
    deleted while runs name it: its versions are what those runs were started with."""
    assistant.archived_at = timezone.now() if archived else None
    assistant.save(update_fields=["archived_at", "updated_at"])
