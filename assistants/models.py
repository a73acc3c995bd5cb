"""Assistants: a name, a description, instructions, a model, its tools and MCP servers, its
approval policy and whether it uses long-term memory. A site assistant (no owner) is made by
staff and shared with groups or everyone; a person's own is theirs, shared with a group of theirs
where the site allows (LOOP_ASSISTANT_SHARING).

Every save makes a new AssistantVersion, a frozen snapshot: a run records the version it was
started with (AgentRun.assistant_version and AgentRun.allowed), so a later edit changes no past
record. An assistant is archived, never deleted, while runs name it."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from core.instructions import INSTRUCTIONS_CHARS

NAME_CHARS = 80
DESCRIPTION_CHARS = 300


class Assistant(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="assistants",
        help_text="Empty: a site assistant, made by staff.",
    )
    name = models.CharField(max_length=NAME_CHARS)
    description = models.CharField(max_length=DESCRIPTION_CHARS, blank=True)
    instructions = models.CharField(max_length=INSTRUCTIONS_CHARS, blank=True)
    # A qualified model name (agent.llm.factory.ModelChoice.name); "": the person's pick.
    model = models.CharField(max_length=200, blank=True)
    all_tools = models.BooleanField(default=True, help_text="Every built-in tool the person has.")
    tool_names = models.JSONField(default=list, blank=True)
    all_mcp_servers = models.BooleanField(
        default=True, help_text="Every MCP server the person may use."
    )
    mcp_servers = models.ManyToManyField("mcp_servers.McpServer", blank=True, related_name="+")
    # Tools asked about before each call in its runs, on top of the site's and the person's.
    ask_before = models.JSONField(default=list, blank=True)
    use_memory = models.BooleanField(
        default=True, help_text="Recall long-term memories into its runs and remember outcomes."
    )
    everyone = models.BooleanField(
        default=False, help_text="Shared with every signed-in person (a site assistant only)."
    )
    groups = models.ManyToManyField(Group, blank=True, related_name="assistants")
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("name", "pk")

    def __str__(self) -> str:
        return self.name

    @property
    def is_site(self) -> bool:
        return self.owner_id is None


class AssistantVersion(models.Model):
    """An assistant as it stood after one save: what its runs were started with."""

    assistant = models.ForeignKey(Assistant, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ("assistant", "-number")
        constraints = (
            models.UniqueConstraint(fields=("assistant", "number"), name="one_version_number"),
        )

    def __str__(self) -> str:
        return f"{self.snapshot.get('name', self.assistant_id)} v{self.number}"
