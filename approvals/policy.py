"""Who must be asked about a run's tool calls before they run (core.approval), as the site
runs them: the site's policy (LOOP_APPROVAL, then what staff set in the console), the person's
choices, a conversation's grants ("always allow"), the tool's own rule."""

import json
import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from pydantic import ValidationError

from agent.allowed import allowed_now
from agent.models import AgentRun
from agent.toolset import default_registry, registry_for
from approvals.models import ApprovalMode, ApprovalPreference, SiteToolPolicy, ToolGrant
from core.approval import Approval, Ask
from core.llm import ToolCall
from rights.effective import Rights
from tools.base import Tool, ToolContext

logger = logging.getLogger(__name__)

RUN_CODE, WRITE_FILE = "run_code", "write_file"
# Each tool's mode, by its name.
Modes = dict[str, ApprovalMode]


# The site's policy ------------------------------------------------------------------------------


def configured_modes(raw: str | None = None) -> Modes:
    """LOOP_APPROVAL read: `tool=ask` or `tool=auto`, comma-separated."""
    raw = settings.LOOP_APPROVAL if raw is None else raw
    modes: Modes = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        tool, _, mode = (piece.strip() for piece in item.partition("="))
        if not tool or mode not in ApprovalMode.values:
            raise ImproperlyConfigured(
                f"LOOP_APPROVAL: {item!r} is not tool=ask or tool=auto (say "
                "LOOP_APPROVAL=run_code=ask,write_file=ask)."
            )
        modes[tool] = ApprovalMode(mode)
    return modes


def site_modes() -> Modes:
    """Each tool's mode as the site sets it: LOOP_APPROVAL, then what staff set in the console
    (which wins); a tool named by neither runs without asking."""
    modes = configured_modes()
    set_by_staff = SiteToolPolicy.objects.values_list("tool", "mode")
    modes.update((tool, ApprovalMode(mode)) for tool, mode in set_by_staff)
    return modes


def site_asks(tool: str, modes: Modes | None = None) -> bool:
    return (site_modes() if modes is None else modes).get(tool) == ApprovalMode.ASK


def modes_in_effect() -> list[dict[str, str]]:
    """Each tool of this Loop (and any other a rule names): what LOOP_APPROVAL says, what the
    console says, and the mode that applies, as the console's policy page shows them."""
    configured = configured_modes()
    console = dict(SiteToolPolicy.objects.values_list("tool", "mode"))
    effective = site_modes()
    tools = list(default_registry().tools)
    named = [*tools, *sorted(effective.keys() - set(tools))]
    return [
        {
            "tool": tool,
            "setting": configured.get(tool, ""),
            "console": console.get(tool, ""),
            "mode": effective.get(tool, ApprovalMode.AUTO),
        }
        for tool in named
    ]


def setting_text() -> str:
    """LOOP_APPROVAL as the site set it, or what its absence means."""
    return settings.LOOP_APPROVAL.strip() or "(not set: every tool runs without asking)"


# A person's choices -----------------------------------------------------------------------------


def preference_of(user: User) -> ApprovalPreference:
    """The person's choices (not stored until they make one)."""
    found = ApprovalPreference.objects.filter(user=user).first()
    return found or ApprovalPreference(user=user)


def person_asks(preference: ApprovalPreference, tool: str) -> bool:
    if preference.ask_any_tool:
        return True
    return (tool == RUN_CODE and preference.ask_run_code) or (
        tool == WRITE_FILE and preference.ask_write_file
    )


# What a grant allows: a tool's name, and the MCP server whose tool it is (None: Loop's own).
Granted = tuple[str, int | None]


def granted_tools(conversation_id: int | None) -> set[Granted]:
    """The tools its person allowed for the whole conversation ("always allow"), each with its
    server: a grant lets only the tool of that name on that server run."""
    if conversation_id is None:
        return set()
    live = ToolGrant.objects.filter(conversation_id=conversation_id, revoked_at__isnull=True)
    return set(live.values_list("tool", "server_id"))


def grant_of(tool: Tool) -> Granted:
    return (tool.name, tool.server_id)


@dataclass
class Policy:
    """Who asks about a run's calls, read once for the run: the site's modes, its person's
    choices, its conversation's grants; the tools' own rules decide within."""

    tools: dict[str, Tool]
    context: ToolContext
    modes: Modes
    preference: ApprovalPreference
    granted: set[Granted]
    # The tools the run's rights ask about (its person's groups, its assistant: rights.effective),
    # whatever the person chose or granted: stricter than the site, never looser.
    rights_ask: frozenset[str] = frozenset()

    def __call__(self, call: ToolCall) -> Ask | None:
        tool = self.tools.get(call.name)
        if tool is None:  # an unknown tool is an error result, never a question
            return None
        why = self.why(call.name) or self.tools_own_why(tool)
        if why is None or not self.tool_asks(tool, call.arguments):
            return None
        return Ask(why)

    def why(self, tool: str) -> str | None:
        if self.modes.get(tool) == ApprovalMode.ASK:
            return f"The site asks before every {tool} call."
        if tool in self.rights_ask:
            return f"Your group or assistant asks before every {tool} call."
        if person_asks(self.preference, tool) and not self.allowed(tool):
            return f"You asked to decide before {tool} runs."
        return None

    def tools_own_why(self, tool: Tool) -> str | None:
        """A tool that asks by default (an MCP tool) asks unless its person allowed it for the
        conversation; one that always asks (a destructive MCP tool) asks regardless."""
        if tool.always_ask or (tool.default_ask and not self.allowed(tool.name)):
            return tool.default_ask or None
        return None

    def allowed(self, name: str) -> bool:
        """Whether the conversation allows the run's tool of that name: its own server's, for an
        MCP tool (a grant of another server's tool under that name allows nothing)."""
        tool = self.tools.get(name)
        return (name, tool.server_id if tool else None) in self.granted

    def tool_asks(self, tool: Tool, arguments: str) -> bool:
        """The tool's own rule, on arguments it accepts (a call it refuses is an error result
        that runs nothing: not worth a question)."""
        if tool.asks is None:
            return True
        try:
            checked = tool.arguments.model_validate(json.loads(arguments or "{}"))
        except (ValueError, ValidationError):
            return False
        try:
            return tool.asks(checked, self.context)
        except Exception:
            logger.exception("%s's rule on asking failed; it asks", tool.name)
            return True


class LazyPolicy:
    """The run's policy, read at its first tool call: a run that calls none reads nothing."""

    def __init__(
        self,
        run: AgentRun,
        context: ToolContext,
        tools: dict[str, Tool] | None,
        rights: Rights | None = None,
    ) -> None:
        self.run, self.context, self.tools, self.rights = run, context, tools, rights
        self.policy: Policy | None = None

    def __call__(self, call: ToolCall) -> Ask | None:
        if self.policy is None:
            self.policy = policy_for(self.run, self.context, self.tools, self.rights)
        return self.policy(call)


def policy_for(
    run: AgentRun,
    context: ToolContext,
    tools: dict[str, Tool] | None = None,
    rights: Rights | None = None,
) -> Policy:
    """`tools`: the run's own, when its worker has them already (else read: its person's);
    `rights`: what the run may use at this attempt (else read: agent.allowed.allowed_now)."""
    rights = allowed_now(run) if rights is None else rights
    return Policy(
        tools=registry_for(run.user, rights).tools if tools is None else tools,
        context=context,
        modes=site_modes(),
        preference=preference_of(run.user),
        granted=granted_tools(run.conversation_id),
        rights_ask=rights.ask,
    )


def approval_for(
    run: AgentRun,
    context: ToolContext,
    tools: dict[str, Tool] | None = None,
    rights: Rights | None = None,
) -> Approval:
    return LazyPolicy(run, context, tools, rights)


def revoke_grant(user: User, conversation_id: int, tool: str) -> int:
    """The conversation's "always allow" of `tool` ends: its calls ask again."""
    grants = ToolGrant.objects.filter(
        conversation__owner=user,
        conversation_id=conversation_id,
        tool=tool,
        revoked_at__isnull=True,
    )
    return grants.update(revoked_at=timezone.now())
