"""What a group's people may use: the models offered, the built-in tools, the MCP servers, and
the tools they are asked about before a call (stricter than the site, never looser).

A group with no row here decides nothing; a person's rights are the union of their groups' rows
(rights/effective.py), and a person in no group with a row gets LOOP_UNGROUPED_RIGHTS."""

from django.contrib.auth.models import Group
from django.db import models


class GroupRights(models.Model):
    group = models.OneToOneField(
        Group, on_delete=models.CASCADE, primary_key=True, related_name="rights"
    )
    # Each "all_…" on: everything the site offers of that kind, whatever the list says.
    all_models = models.BooleanField(
        default=True, help_text="Every model the site offers (else only those listed)."
    )
    # Qualified model names (agent.llm.factory.ModelChoice.name: `mock`, `groq:…`, `openai:…`).
    model_names = models.JSONField(default=list, blank=True)
    all_tools = models.BooleanField(
        default=True, help_text="Every built-in tool (else only those listed)."
    )
    # Built-in tools by name (tools.registry.BUILTIN_TOOLS and memory's `remember`).
    tool_names = models.JSONField(default=list, blank=True)
    all_mcp_servers = models.BooleanField(
        default=True,
        help_text="Every MCP server open to the person (else those listed).",
    )
    mcp_servers = models.ManyToManyField("mcp_servers.McpServer", blank=True, related_name="+")
    # Tools (a built-in tool's name, an MCP tool's `<prefix>__<tool>`) the group's people are
    # asked about before each call, whatever their own choices: on top of the site's policy.
    ask_before = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "group rights"
        verbose_name_plural = "group rights"

    def __str__(self) -> str:
        return f"Rights of {self.group}"
