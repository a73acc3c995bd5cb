"""What a run may use, recorded when it starts and narrowed at each attempt.

At the start: the person's rights (rights.effective.rights_of) under the choices of the assistant
the conversation was started with, if any (its version's snapshot), stored as AgentRun.allowed.
A model outside them is refused before anything is stored (agent.runs.check_model_allowed).
At each attempt the worker reads `allowed_now`: the record under the person's rights as they
stand then, so a group's right taken away binds a run that resumes or is continued too."""

from typing import Any

from django.contrib.auth.models import User

from agent.models import AgentRun
from assistants.models import AssistantVersion
from assistants.versions import rights_of_version
from rights.effective import Rights, rights_of


def allowed_at_start(user: User, version: AssistantVersion | None) -> dict[str, Any]:
    """The record a new run stores (AgentRun.allowed)."""
    rights = rights_of(user)
    assistant = None
    if version is not None:
        rights = rights.narrowed(rights_of_version(version.snapshot))
        assistant = {
            "id": version.assistant_id,
            "version": version.number,
            "name": version.snapshot.get("name", ""),
        }
    return {"rights": rights.record(), "assistant": assistant}


def recorded_rights(run: AgentRun) -> Rights:
    return Rights.from_record((run.allowed or {}).get("rights"))


def allowed_now(run: AgentRun) -> Rights:
    """What the run may use at this attempt: its record under its person's rights now."""
    return recorded_rights(run).narrowed(rights_of(run.user))
