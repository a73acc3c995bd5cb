"""/api/v1/tools and /api/v1/models: what a run of the key's person may use. The tools are those
a run of theirs gets (agent.toolset.registry_for: Loop's own and the MCP tools offered to them),
each with whether its calls wait for their decision (approvals.policy, as a new conversation's
run would ask: the site's modes, the person's choices, the tool's own rule); the models are those
this Loop offers (agent.llm.factory.offered_models), the default marked."""

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Field, Router, Schema

from agent import runs
from agent.llm.factory import offered_models
from agent.toolset import registry_for
from api.auth import READ, person_of
from api.errors import refusals
from approvals.policy import Policy, preference_of, site_modes
from chat.mcp import tools_of
from rights.effective import rights_of
from tools.base import Tool
from tools.context import context_for

router = Router(tags=["tools"])
REFUSED = refusals()
BUILTIN = "builtin"


class ToolOut(Schema):
    name: str = Field(description="As the model calls it (an MCP tool's: `<prefix>__<tool>`).")
    description: str
    source: str = Field(description="\"builtin\" (Loop's own), or the MCP server's name.")
    asks_approval: bool = Field(
        description="Whether its calls wait for your decision in a new conversation (an "
        '"always allow" in a conversation may lift it there, unless the tool always asks).'
    )
    why: str = Field(description="Why it asks; '' when it does not.")


class ModelOut(Schema):
    name: str = Field(description="What to give as a run's `model`.")
    provider: str
    model: str
    default: bool = Field(description="The one a run without `model` gets.")


def policy_of(person: User, tools: dict[str, Tool]) -> Policy:
    """The policy a run of the person's in a new conversation would follow (no grants yet)."""
    return Policy(
        tools=tools,
        context=context_for(person),
        modes=site_modes(),
        preference=preference_of(person),
        granted=set(),
    )


@router.get("/tools", response={200: list[ToolOut], **REFUSED}, auth=READ)
def list_tools(request: HttpRequest) -> list[ToolOut]:
    """The tools a run of yours gets: Loop's own, then the MCP tools offered to you."""
    person = person_of(request)
    tools = registry_for(person).tools
    servers = {name: shown.server for name, shown in tools_of(person).items()}
    policy = policy_of(person, tools)
    listed = []
    for name, tool in tools.items():
        why = policy.why(name) or policy.tools_own_why(tool) or ""
        source = BUILTIN if tool.server_id is None else servers.get(name, "mcp")
        listed.append(
            ToolOut(
                name=name,
                description=tool.description,
                source=source,
                asks_approval=bool(why),
                why=why,
            )
        )
    return listed


@router.get("/models", response={200: list[ModelOut], **REFUSED}, auth=READ)
def list_models(request: HttpRequest) -> list[ModelOut]:
    """The models this Loop offers you (those your groups allow); `default` is the one a run gets
    when it names none."""
    offered = offered_models(rights_of(person_of(request)))
    try:
        default = runs.chat_model(None, "", offered)
    except runs.InvalidTask:
        default = None
    return [
        ModelOut(
            name=choice.name,
            provider=choice.provider,
            model=choice.model,
            default=choice == default,
        )
        for choice in offered
    ]
