"""/api/v1/assistants: the assistants the key's person may start a conversation with (their own,
those a group of theirs shares, the site's; assistants.versions.assistants_for), to name as
`assistant` when starting a run (POST /runs)."""

from django.http import HttpRequest
from ninja import Field, Router, Schema

from api.auth import READ, person_of
from api.errors import refusals
from assistants.models import Assistant
from assistants.versions import assistants_for

router = Router(tags=["assistants"])


class AssistantOut(Schema):
    id: int
    name: str
    description: str
    version: int = Field(description="Its latest version: what a run started now gets.")
    model: str = Field(description="The model its runs use when none is named; '' for none.")
    tools: list[str] | None = Field(description="Loop's own tools it may use; null: all yours.")
    use_memory: bool
    ask_before: list[str] = Field(description="Tools that wait for your decision in its runs.")
    owner: str | None = Field(description="Its maker's username; null for a site assistant.")


def assistant_out(assistant: Assistant) -> AssistantOut:
    return AssistantOut(
        id=assistant.pk,
        name=assistant.name,
        description=assistant.description,
        version=assistant.version,
        model=assistant.model,
        tools=None if assistant.all_tools else sorted(assistant.tool_names),
        use_memory=assistant.use_memory,
        ask_before=sorted(assistant.ask_before),
        owner=assistant.owner.get_username() if assistant.owner else None,
    )


@router.get(
    "/assistants",
    response={200: list[AssistantOut], **refusals()},
    auth=READ,
    url_name="assistants",
)
def list_assistants(request: HttpRequest) -> list[AssistantOut]:
    """The assistants you may start a conversation with: name one's `id` as `assistant` in
    POST /runs. None archived; another person's only when shared with a group of yours."""
    found = assistants_for(person_of(request)).select_related("owner").order_by("name", "pk")
    return [assistant_out(assistant) for assistant in found]
