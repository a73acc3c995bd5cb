"""A person's form for an assistant of theirs: what it offers is what the person may use
(rights.effective.rights_of), so an assistant never names a model, a tool or an MCP server its
maker could not use; a tampered form naming another is refused like any invalid choice. Sharing
is with groups of the person's own, and only while the site allows it (LOOP_ASSISTANT_SHARING).

Every save is a new frozen version (assistants.versions.new_version)."""

from typing import Any, ClassVar

from django import forms
from django.contrib.auth.models import Group, User
from django.db import transaction

from assistants.models import Assistant
from assistants.versions import new_version, sharing_allowed
from mcp_servers.models import McpServer
from mcp_servers.tools import servers_for
from memory.tools import REMEMBER
from rights.effective import Rights, rights_of
from tools.registry import BUILTIN_TOOLS

YOUR_PICK = ("", "The model picked in the chat")


def tools_of(rights: Rights) -> list[str]:
    """Loop's own tools the person may use, by name."""
    return [tool.name for tool in (*BUILTIN_TOOLS, REMEMBER) if rights.allows_tool(tool.name)]


def servers_of(user: User, rights: Rights) -> Any:
    """The MCP servers the person may use: open to them, and allowed by their groups."""
    servers = servers_for(user)
    if rights.mcp_servers is not None:
        servers = servers.filter(pk__in=rights.mcp_servers)
    return McpServer.objects.filter(pk__in=servers.values("pk")).order_by("name")


class AssistantForm(forms.ModelForm[Assistant]):
    """`models`: the (name, label) of each model the person may pick (the chat's own list,
    agent.llm.factory.offered_models(rights)), given by the page, which may ask the agent."""

    model = forms.ChoiceField(required=False, label="Model")
    tool_names = forms.MultipleChoiceField(
        required=False, label="Tools", widget=forms.CheckboxSelectMultiple
    )
    ask_before = forms.MultipleChoiceField(
        required=False, label="Ask before", widget=forms.CheckboxSelectMultiple
    )
    mcp_servers = forms.ModelMultipleChoiceField(
        queryset=McpServer.objects.none(),
        required=False,
        label="MCP servers",
        widget=forms.CheckboxSelectMultiple,
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.none(),
        required=False,
        label="Share with",
        widget=forms.CheckboxSelectMultiple,
        help_text="Members of a group you tick may start conversations with it (not edit it).",
    )

    class Meta:
        model = Assistant
        fields = (
            "name",
            "description",
            "instructions",
            "model",
            "all_tools",
            "tool_names",
            "all_mcp_servers",
            "mcp_servers",
            "ask_before",
            "use_memory",
            "groups",
        )
        labels: ClassVar[dict[str, str]] = {
            "all_tools": "Every tool you have",
            "all_mcp_servers": "Every MCP server you may use",
            "use_memory": "Use long-term memory",
        }
        help_texts: ClassVar[dict[str, str]] = {
            "instructions": "What it should do, and how: each run of it follows them.",
            "all_tools": "Untick to choose its tools below.",
            "all_mcp_servers": "Untick to choose its MCP servers below.",
        }
        widgets: ClassVar[dict[str, Any]] = {
            "description": forms.TextInput(),
            "instructions": forms.Textarea(attrs={"rows": 6}),
        }

    def __init__(
        self, *args: Any, user: User, models: list[tuple[str, str]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        rights = rights_of(user)
        tools = [(name, name) for name in tools_of(rights)]
        fields: dict[str, Any] = self.fields
        fields["model"].choices = [YOUR_PICK, *models]
        fields["tool_names"].choices = tools
        fields["ask_before"].choices = tools
        fields["mcp_servers"].queryset = servers_of(user, rights)
        if sharing_allowed():
            fields["groups"].queryset = user.groups.order_by("name")
        else:
            del self.fields["groups"]

    @transaction.atomic
    def save(self, commit: bool = True) -> Assistant:
        """Save the assistant (the person's own) and record it as its next version."""
        assistant: Assistant = super().save(commit=False)
        if assistant.pk is None:
            assistant.owner = self.user
        assistant.save()
        self.save_m2m()
        new_version(assistant, self.user)
        return assistant
