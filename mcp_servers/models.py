"""MCP servers whose tools Loop's agent may use, the tools as they were pinned, and a person's
OAuth connection to a server.

A site server (no owner) is added by staff in the console or declared in LOOP_MCP_SERVERS; a
personal server belongs to one person, who alone can see or use it. A tool's definition (name,
description, schema, annotations) is pinned by digest the first time it is seen; a later
difference is held for review (`held_*`) and the tool is not offered until its operator or
person accepts it (mcp_servers/pinning.py). Credentials are stored sealed (mcp_servers/secrets.py),
never in clear.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

# A prefix names a server's tools to the model (`<prefix>__<tool>`): short, lower case, and
# free of the separator, so a tool name reads back to one server.
PREFIX_CHARS = 24
prefix_validator = RegexValidator(
    r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$",
    "Lower-case letters and digits, joined by single underscores.",
)

CONSOLE, ENVIRONMENT, PERSON = "console", "environment", "person"
SOURCES = [
    (CONSOLE, "Added in the console"),
    (ENVIRONMENT, "Declared in LOOP_MCP_SERVERS"),
    (PERSON, "A person's own"),
]
NO_AUTH, HEADERS, OAUTH = "none", "headers", "oauth"
AUTHS = [(NO_AUTH, "None"), (HEADERS, "Headers or a bearer token"), (OAUTH, "OAuth 2.1")]


class McpServer(models.Model):
    name = models.CharField(max_length=80)
    prefix = models.CharField(
        max_length=PREFIX_CHARS,
        validators=[prefix_validator],
        help_text="The model sees this server's tools as <prefix>__<tool>.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="mcp_servers",
        help_text="Empty for a site server; a personal server's person.",
    )
    source = models.CharField(max_length=16, choices=SOURCES, default=CONSOLE)
    url = models.CharField(max_length=500, blank=True, verbose_name="URL")
    # A stdio server's command line (LOOP_MCP_SERVERS only: never a person's, never the console's).
    command = models.JSONField(default=list, blank=True)
    auth = models.CharField(max_length=16, choices=AUTHS, default=NO_AUTH)
    # The request headers (a bearer token is an Authorization header), sealed.
    sealed_headers = models.TextField(blank=True, default="")
    enabled = models.BooleanField(default=True)
    # Who may use a site server: everyone, or the people and groups named.
    everyone = models.BooleanField(default=False, help_text="Every person may use its tools.")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    groups = models.ManyToManyField(Group, blank=True, related_name="+")
    # Whether a tool's readOnlyHint may lower its approval to `auto` (the server's own word).
    trust_hints = models.BooleanField(
        default=False, help_text="A tool marked read-only by the server runs without asking."
    )
    # A call's time; empty: the site's LOOP_MCP_CALL_SECONDS (mcp_servers.endpoints.call_seconds).
    call_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Seconds a call may take; empty: the site's setting (LOOP_MCP_CALL_SECONDS).",
    )
    # Health, as the last discovery found it.
    discovered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    protocol_version = models.CharField(max_length=32, blank=True, default="")
    server_info = models.CharField(max_length=200, blank=True, default="")
    # Asked to be discovered again (a list_changed notice arrived during a call).
    stale = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MCP server"
        ordering = ("owner_id", "name")
        constraints = (
            models.UniqueConstraint(
                fields=["prefix"], condition=Q(owner__isnull=True), name="mcp_site_prefix_unique"
            ),
            models.UniqueConstraint(fields=["owner", "prefix"], name="mcp_personal_prefix_unique"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(owner__isnull=True), name="mcp_site_name_unique"
            ),
        )

    def __str__(self) -> str:
        return self.name

    @property
    def is_site(self) -> bool:
        return self.owner_id is None

    @property
    def target(self) -> str:
        """Where it is reached, for people and logs (never a credential)."""
        return self.url or " ".join(str(part) for part in self.command)


class McpTool(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)  # the server's own name for it
    # What the model calls it: <prefix>__<name>, made safe for function names.
    exposed_name = models.CharField(max_length=64)
    # The pinned definition: what the model is shown and what arguments are checked against.
    title = models.CharField(max_length=200, blank=True, default="")
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    digest = models.CharField(max_length=64)
    pinned_at = models.DateTimeField()
    enabled = models.BooleanField(default=True)
    # Runs without asking (its operator's, or for a personal server its person's, choice).
    auto = models.BooleanField(default=False)
    # A definition found different from the pinned one, waiting for review: while it waits, the
    # tool is not offered.
    held_definition = models.JSONField(null=True, blank=True)
    held_digest = models.CharField(max_length=64, blank=True, default="")
    held_at = models.DateTimeField(null=True, blank=True)
    # The server no longer lists it: not offered until it comes back.
    missing_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP tool"
        ordering = ("server", "name")
        constraints = (
            models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_name_unique"),
            models.UniqueConstraint(
                fields=["server", "exposed_name"], name="mcp_tool_exposed_unique"
            ),
        )

    def __str__(self) -> str:
        return self.exposed_name

    @property
    def held(self) -> bool:
        return bool(self.held_digest)

    @property
    def offered(self) -> bool:
        return self.enabled and not self.held and self.missing_since is None


CONNECTED, RECONNECT, PENDING = "connected", "reconnect", "pending"
CONNECTION_STATES = [
    (PENDING, "Connecting"),
    (CONNECTED, "Connected"),
    (RECONNECT, "Needs reconnecting"),
]


class McpConnection(models.Model):
    """A person's OAuth grant for one server: the client Loop registered, the tokens, and the
    flow in progress; all of it sealed. Refreshed one at a time per row (a row lock), so a
    rotated refresh token is never replayed (mcp_servers/oauth.py)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_connections"
    )
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="connections")
    state = models.CharField(max_length=16, choices=CONNECTION_STATES, default=PENDING)
    # The authorization server's metadata as discovered (endpoints: public, not secret).
    authorization_server = models.JSONField(default=dict, blank=True)
    sealed_client = models.TextField(blank=True, default="")
    sealed_tokens = models.TextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    # The flow in progress: its state parameter (hashed) and PKCE verifier (sealed).
    flow_state = models.CharField(max_length=64, blank=True, default="")
    sealed_verifier = models.TextField(blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    refreshed_at = models.DateTimeField(null=True, blank=True)
    # A refresh sent whose answer never came (it ran out of time): the server may have rotated
    # the refresh token Loop still holds, and then refuse it as replayed. Cleared by a refresh
    # that works, or connecting again.
    unanswered_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP connection"
        constraints = (
            models.UniqueConstraint(fields=["user", "server"], name="mcp_connection_unique"),
        )

    def __str__(self) -> str:
        return f"{self.server} for {self.user}"
