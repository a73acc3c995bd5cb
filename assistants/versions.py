"""An assistant's versions: each save snapshots it, and what a run of it may use is read from the
snapshot it was started with, never from the assistant as it stands."""

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q, QuerySet

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


def assistants_for(user: User) -> QuerySet[Assistant]:
    """The assistants `user` may start a conversation with: their own, the site's shared with
    everyone or a group of theirs, and others' shared with a group of theirs; none archived."""
    theirs = Q(groups__in=user.groups.all())
    site = Q(owner__isnull=True) & (Q(everyone=True) | theirs)
    shared = Q(owner__isnull=False) & theirs
    visible = Q(owner=user) | site | shared
    return Assistant.objects.filter(visible, archived_at__isnull=True).distinct()
