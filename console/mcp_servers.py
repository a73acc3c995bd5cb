"""The console's MCP pages: site servers (added here, or declared in LOOP_MCP_SERVERS and shown
read-only), people's own servers (read-only, for audit; an operator may disable one), each
server's health and the calls made to it, its tools with their pinned definitions and any
definition held for review, and people's OAuth connections (read-only, no token anywhere).

Credentials are never shown: the pages say whether a server has some, never what they are, and
a person's server's address is shown without its query (a token may ride there). A tool's
description is the server's text: it is shown escaped, as text, capped as it was pinned.
"""

import difflib
import json
from collections.abc import Iterable
from typing import Any, ClassVar
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Concat
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from agent.models import ToolExecution
from console.mcp_forms import SiteServerForm
from console.widgets import (
    AuditAdmin,
    MalformedFiltersSaid,
    badge,
    change_url,
    link,
    list_url,
    pretty_json,
    tool_badge,
    user_link,
)
from core.results import ToolStatus
from mcp_servers.declared import ensure_declared
from mcp_servers.discovery import DiscoveryFailed, discover
from mcp_servers.models import (
    CONNECTED,
    CONSOLE,
    ENVIRONMENT,
    OAUTH,
    PERSON,
    McpConnection,
    McpServer,
    McpTool,
)
from mcp_servers.pinning import SEPARATOR, Changes, accept_held
from workspace.requests import person_of

# A call that went wrong on the server's side (a denial or a skip is the run's, not the server's).
FAILED = (ToolStatus.ERROR, ToolStatus.TIMEOUT)
STATUSES = tuple(ToolStatus)
EMPTY = format_html('<span class="loop-none">{}</span>', "—")


# Calls: ToolExecution rows named <prefix>__<tool>, a personal server's only its person's --------


def calls_of(server: McpServer) -> QuerySet[ToolExecution]:
    """The recorded calls of the server's tools. A person whose own server has the prefix of a
    site server made their calls to their own."""
    calls = ToolExecution.objects.filter(tool__startswith=f"{server.prefix}{SEPARATOR}")
    if server.owner_id is not None:
        return calls.filter(run__user_id=server.owner_id)
    return calls.exclude(run__user__mcp_servers__prefix=server.prefix)


def counted(rows: QuerySet[Any]) -> Subquery:
    """A row count as a subquery (no GROUP BY in the outer query)."""
    return Subquery(
        rows.order_by().annotate(n=Func(F("pk"), function="COUNT")).values("n"),
        output_field=IntegerField(),
    )


def calls_counted(tool: OuterRef | None, prefix: str, owner: str, failed: bool) -> Case:
    """For each listed row, the count of its calls (`tool` names one tool, else the server's
    prefix names them all); `prefix` and `owner` are the paths to the server's fields."""
    named = ToolExecution.objects.all()
    if tool is not None:
        named = named.filter(tool=tool)
    else:
        named = named.filter(tool__startswith=Concat(OuterRef(prefix), Value(SEPARATOR)))
    if failed:
        named = named.filter(status__in=FAILED)
    own_prefix = McpServer.objects.filter(
        owner=OuterRef("run__user"), prefix=OuterRef(OuterRef(prefix))
    )
    site = named.exclude(Exists(own_prefix))
    personal = named.filter(run__user=OuterRef(owner))
    return Case(
        When(**{f"{owner}__isnull": True}, then=counted(site)),
        default=counted(personal),
        output_field=IntegerField(),
    )


def status_table(rows: Iterable[dict[str, Any]]) -> SafeString:
    """Counts by status, a row per tool: `rows` are {"tool", "status", "n"}."""
    by_tool: dict[str, dict[str, int]] = {}
    for row in rows:
        by_tool.setdefault(row["tool"], {})[row["status"]] = row["n"]
    if not by_tool:
        return format_html('<span class="loop-none">{}</span>', "No calls recorded.")
    head = format_html_join("", "<th>{}</th>", ((tool_badge(status),) for status in STATUSES))
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td>{}</tr>",
        (
            (
                link(f"{list_url(ToolExecution)}?{urlencode({'tool': tool})}", tool),
                sum(counts.values()),
                format_html_join("", "<td>{}</td>", ((counts.get(s, 0),) for s in STATUSES)),
            )
            for tool, counts in sorted(by_tool.items())
        ),
    )
    return format_html(
        '<table class="loop-table loop-numbers"><thead><tr><th>tool</th><th>calls</th>{}</tr>'
        "</thead><tbody>{}</tbody></table>",
        head,
        body,
    )


def by_status(calls: QuerySet[ToolExecution]) -> list[dict[str, Any]]:
    return [dict(row) for row in calls.order_by().values("tool", "status").annotate(n=Count("pk"))]


# Shared displays ----------------------------------------------------------------------------------


def shown_address(server: McpServer) -> str:
    """Where the server is: a person's URL without its query (a token may ride there), a stdio
    server's command."""
    url = str(server.url)
    if server.command:
        return str(server.target)
    if server.is_site or "?" not in url:
        return url
    return url.split("?", 1)[0] + "?…"


def health_badge(server: McpServer) -> SafeString:
    if server.last_error:
        return badge("error", tone="bad", symbol="✗")
    if server.discovered_at is None:
        return badge("never checked", tone="quiet", symbol="…")
    if server.stale:
        return badge("to check again", tone="warn", symbol="↻")
    return badge("listed", tone="good", symbol="✓")


def tool_state(tool: McpTool) -> SafeString:
    if tool.held:
        return badge("held for review", tone="warn", symbol="✋")
    if tool.missing_since is not None:
        return badge("no longer listed", tone="quiet", symbol="∅")
    if not tool.enabled:
        return badge("disabled", tone="quiet", symbol="■")
    return badge("offered", tone="good", symbol="✓")


def hints(annotations: dict[str, Any]) -> SafeString:
    marks = []
    if annotations.get("read_only_hint") is True:
        marks.append(badge("read-only", tone="quiet", symbol="👁"))
    if annotations.get("destructive_hint") is True:
        marks.append(badge("destructive", tone="bad", symbol="⚠"))
    if not marks:
        return EMPTY
    return format_html_join(" ", "{}", ((mark,) for mark in marks))


def as_text(text: str) -> SafeString:
    """A server's words, escaped: shown as text, never as the page's HTML."""
    if not text:
        return EMPTY
    return format_html('<pre class="loop-text">{}</pre>', text)


def editable_server(server: McpServer | None) -> bool:
    """Only a site server added in the console is changed here: the environment's follow
    LOOP_MCP_SERVERS, a person's are theirs."""
    return server is None or (server.source == CONSOLE and server.is_site)


def reported(server: McpServer, changes: Changes) -> str:
    said = [f"{len(changes.added)} added", f"{len(changes.held)} held for review"]
    if changes.missing:
        said.append(f"{len(changes.missing)} no longer listed")
    if changes.refused:
        refused = "; ".join(f"{name}: {why}" for name, why in changes.refused.items())
        said.append(f"{len(changes.refused)} refused ({refused})")
    return f"{server.name} listed its tools: {', '.join(said)}."


# Servers ------------------------------------------------------------------------------------------


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("site", "site servers"), ("personal", "people's own")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("site", "personal"):
            return queryset.filter(owner__isnull=self.value() == "site")
        return queryset


class McpToolInline(admin.TabularInline[Any, Any]):
    """The server's tools: enabled and auto are changed here for a console server."""

    model = McpTool
    extra = 0
    can_delete = False
    fields = ("tool_page", "state", "hint_marks", "enabled", "auto", "pinned_at")
    readonly_fields = ("tool_page", "state", "hint_marks", "pinned_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return editable_server(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="tool")
    def tool_page(self, tool: McpTool) -> SafeString:
        return link(change_url(tool), tool.exposed_name)

    @admin.display(description="state")
    def state(self, tool: McpTool) -> SafeString:
        return tool_state(tool)

    @admin.display(description="hints")
    def hint_marks(self, tool: McpTool) -> SafeString:
        return hints(tool.annotations or {})


class McpServerAdmin(MalformedFiltersSaid):
    """Site servers added here are edited here; the environment's and people's are read-only
    (a person's may be disabled). Saving an enabled server lists its tools at once."""

    form = SiteServerForm
    inlines = (McpToolInline,)
    # Health and held tools first, what a laptop's 1280 px must show; where it is and when it
    # was listed are on its page.
    list_display = (
        "name",
        "health",
        "tools_held",
        "tools_offered",
        "enabled",
        "source",
        "owner_name",
        "who_may_use",
        "call_count",
        "failure_count",
        "prefix",
    )
    list_filter = (KindFilter, "source", "enabled", "auth")
    # Not the URL: a person's may carry a token in its query, which a search would find out.
    search_fields = ("name", "prefix")
    autocomplete_fields = ("users", "groups")
    ordering = ("owner_id", "name")
    list_per_page = 50
    actions = ("check_now", "disable_servers")
    change_form_template = "admin/mcp_servers/mcpserver/change_form.html"
    HEALTH = ("health", "discovered_at", "protocol_version", "server_info", "last_error")

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpServer]:
        tools = McpTool.objects.filter(server=OuterRef("pk"))
        offered = tools.filter(enabled=True, held_digest="", missing_since__isnull=True)
        servers: QuerySet[McpServer] = super().get_queryset(request)
        return (
            servers.select_related("owner")
            .prefetch_related("users", "groups")
            .annotate(
                offered_count=counted(offered),
                held_count=counted(tools.exclude(held_digest="")),
                calls=calls_counted(None, "prefix", "owner", failed=False),
                failures=calls_counted(None, "prefix", "owner", failed=True),
            )
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        ensure_declared()  # the environment's servers are listed from the first visit
        return super().changelist_view(request, extra_context)

    # Permissions: the model's permissions, and only a console site server is changed here.

    def has_change_permission(self, request: HttpRequest, obj: McpServer | None = None) -> bool:
        return editable_server(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: McpServer | None = None) -> bool:
        """A console server, by those who may delete servers; a person's goes with its person,
        which only a superuser deletes here; the environment's never (it would come back)."""
        if obj is not None and obj.source == ENVIRONMENT:
            return False
        if obj is not None and obj.source == PERSON:
            return bool(request.user.is_active and request.user.is_superuser)
        return bool(super().has_delete_permission(request, obj))

    def has_check_permission(self, request: HttpRequest) -> bool:
        return bool(super().has_change_permission(request))

    def has_disable_permission(self, request: HttpRequest) -> bool:
        return bool(super().has_change_permission(request))

    # The form: a console server's fields, or everything read-only.

    def get_fieldsets(self, request: HttpRequest, obj: McpServer | None = None) -> Any:
        health = ("Health", {"fields": self.HEALTH})
        calls = ("Calls", {"fields": ("calls_by_tool",)})
        if not self.has_change_permission(request, obj):
            return (
                (None, {"fields": ("name", "prefix_names", "kind", "address", "enabled")}),
                ("Access", {"fields": ("auth", "credentials", "who_may_use", "trust_hints")}),
                ("Calls", {"fields": ("call_seconds", "calls_by_tool")}),
                health,
            )
        credentials: tuple[str, ...] = ("auth", "headers", "token", "clear_credentials")
        if obj is not None:
            credentials = ("auth", "credentials", "headers", "token", "clear_credentials")
        prefix = "prefix" if obj is None else "prefix_names"
        fieldsets: list[Any] = [
            (None, {"fields": ("name", "url", prefix, "enabled")}),
            ("Credentials", {"fields": credentials}),
            ("Who may use it", {"fields": ("everyone", "users", "groups")}),
            ("Its tools", {"fields": ("trust_hints", "call_seconds")}),
        ]
        if obj is not None:
            fieldsets += [health, calls]
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: McpServer | None = None) -> Any:
        # Once added, the prefix stays: a new one would rename every tool, and part its calls
        # from their history.
        return (
            "prefix_names",
            "kind",
            "address",
            "credentials",
            "who_may_use",
            "calls_by_tool",
            *self.HEALTH,
        )

    def get_form(
        self,
        request: HttpRequest,
        obj: McpServer | None = None,
        change: bool = False,
        **kwargs: Any,
    ) -> type[forms.ModelForm[Any]]:
        if not self.has_change_permission(request, obj):
            kwargs["form"] = forms.ModelForm  # nothing is taken in: no credentials field at all
        form: type[forms.ModelForm[Any]] = super().get_form(request, obj, change, **kwargs)
        return form

    def save_model(
        self, request: HttpRequest, obj: McpServer, form: forms.ModelForm[Any], change: bool
    ) -> None:
        obj.owner = None
        obj.source = CONSOLE
        super().save_model(request, obj, form, change)

    def save_related(
        self, request: HttpRequest, form: forms.ModelForm[Any], formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        server = form.instance
        if server.enabled:
            self.check_server(request, server)

    def check_server(self, request: HttpRequest, server: McpServer) -> None:
        """List the server's tools now, and say what came of it. A person's server is theirs
        to check: Loop would connect with their credentials, on an operator's word."""
        if not server.is_site:
            self.message_user(
                request,
                f"{server.name} is a person's own server: its person checks it, from their "
                "settings page.",
                messages.WARNING,
            )
            return
        as_user = None
        if server.auth == OAUTH:
            as_user = person_of(request)
            if not server.connections.filter(user=as_user, state=CONNECTED).exists():
                self.message_user(
                    request,
                    f"{server.name} uses OAuth: its tools are listed with a person's connection. "
                    "Connect from your settings page, then check it again.",
                    messages.INFO,
                )
                return
        try:
            changes = discover(server, as_user)
        except DiscoveryFailed as failed:
            self.message_user(request, f"{server.name} was not listed: {failed}", messages.ERROR)
            return
        level = messages.WARNING if changes.held or changes.refused else messages.SUCCESS
        self.message_user(request, reported(server, changes), level)

    @admin.action(description="Check now: list the servers' tools", permissions=["check"])
    def check_now(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset.order_by("pk"):
            self.check_server(request, server)

    @admin.action(description="Disable the selected servers", permissions=["disable"])
    def disable_servers(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        declared = list(queryset.filter(source=ENVIRONMENT).values_list("name", flat=True))
        for server in queryset.exclude(source=ENVIRONMENT).filter(enabled=True):
            self.disable(request, server)
        if declared:
            self.message_user(
                request,
                f"{', '.join(declared)}: declared in LOOP_MCP_SERVERS, which says whether they "
                "are used; change it there.",
                messages.WARNING,
            )

    def disable(self, request: HttpRequest, server: McpServer) -> None:
        McpServer.objects.filter(pk=server.pk).update(enabled=False)
        self.log_change(request, server, "Disabled by an operator.")
        self.message_user(request, f"{server.name} is disabled: its tools are not offered.")

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:server_id>/check/",
                view(require_POST(self.check_view)),
                name="mcp_servers_mcpserver_check",
            ),
            path(
                "<int:server_id>/disable/",
                view(require_POST(self.disable_view)),
                name="mcp_servers_mcpserver_disable",
            ),
            *super().get_urls(),
        ]

    def check_view(self, request: HttpRequest, server_id: int) -> HttpResponse:
        if not self.has_check_permission(request):
            raise PermissionDenied
        server = get_object_or_404(McpServer, pk=server_id)
        self.check_server(request, server)
        return HttpResponseRedirect(change_url(server))

    def disable_view(self, request: HttpRequest, server_id: int) -> HttpResponse:
        if not self.has_disable_permission(request):
            raise PermissionDenied
        server = get_object_or_404(McpServer.objects.exclude(source=ENVIRONMENT), pk=server_id)
        self.disable(request, server)
        return HttpResponseRedirect(change_url(server))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: McpServer | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context |= {
                "server": obj,
                "can_check": obj.is_site and self.has_check_permission(request),
                "can_disable": obj.enabled
                and obj.source != ENVIRONMENT
                and self.has_disable_permission(request),
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    # Columns and read-only fields.

    @admin.display(description="prefix")
    def prefix_names(self, server: McpServer) -> str:
        return f"{server.prefix} (the model sees its tools as {server.prefix}{SEPARATOR}<tool>)"

    @admin.display(description="where")
    def address(self, server: McpServer) -> str:
        return shown_address(server)

    @admin.display(description="kind")
    def kind(self, server: McpServer) -> str:
        if server.is_site:
            return f"Site server ({server.get_source_display().lower()})"
        return f"{server.owner.get_username()}'s own server" if server.owner else "A person's own"

    @admin.display(description="person", ordering="owner__username")
    def owner_name(self, server: McpServer) -> SafeString:
        return user_link(server.owner)

    @admin.display(description="credentials")
    def credentials(self, server: McpServer) -> SafeString | str:
        if server.auth == OAUTH:
            connected = server.connections.filter(state=CONNECTED).count()
            listed = link(list_url(McpConnection, server__id__exact=server.pk), "connections")
            return format_html(
                "OAuth: each person's own grant; {} connected (see {}).", connected, listed
            )
        return "Set (sealed; never shown)." if server.sealed_headers else "None."

    @admin.display(description="who may use it")
    def who_may_use(self, server: McpServer) -> str:
        if not server.is_site:
            return "its person only"
        if server.everyone:
            return "everyone"
        named = [user.get_username() for user in server.users.all()]
        named += [f"group {group.name}" for group in server.groups.all()]
        return ", ".join(named) or "nobody yet"

    @admin.display(description="health")
    def health(self, server: McpServer) -> SafeString:
        return health_badge(server)

    @admin.display(description="tools offered", ordering="offered_count")
    def tools_offered(self, server: McpServer) -> int:
        return int(getattr(server, "offered_count", 0) or 0)

    @admin.display(description="held", ordering="held_count")
    def tools_held(self, server: McpServer) -> SafeString | int:
        held = int(getattr(server, "held_count", 0) or 0)
        return badge(str(held), tone="warn", symbol="✋") if held else 0

    @admin.display(description="calls", ordering="calls")
    def call_count(self, server: McpServer) -> int:
        return int(getattr(server, "calls", 0) or 0)

    @admin.display(description="failed", ordering="failures")
    def failure_count(self, server: McpServer) -> int:
        return int(getattr(server, "failures", 0) or 0)

    @admin.display(description="calls by tool and status")
    def calls_by_tool(self, server: McpServer) -> SafeString:
        return status_table(by_status(calls_of(server)))


# Tools --------------------------------------------------------------------------------------------


class HeldFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"
    STATES: ClassVar[dict[str, Q]] = {
        "held": Q(held_digest__gt=""),
        "offered": Q(enabled=True, held_digest="", missing_since__isnull=True),
        "disabled": Q(enabled=False),
        "missing": Q(missing_since__isnull=False),
    }

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(state, state) for state in self.STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.STATES.get(self.value() or "")
        return queryset if chosen is None else queryset.filter(chosen)


class McpToolForm(forms.ModelForm[McpTool]):
    class Meta:
        model = McpTool
        fields = ("enabled", "auto")


class McpToolAdmin(MalformedFiltersSaid):
    """A tool's pinned definition and any held one beside it, with their difference. Enabled
    and auto are changed for a console server's tools; a held definition of a site server's
    tool is accepted here, a person's only by its person, on their settings page."""

    form = McpToolForm
    list_display = (
        "exposed_name",
        "server_page",
        "state",
        "enabled",
        "auto",
        "hint_marks",
        "pinned_at",
        "held_at",
        "call_count",
        "failure_count",
    )
    list_select_related = ("server__owner",)
    list_filter = (HeldFilter, "server__source", "auto")
    search_fields = ("exposed_name", "name", "server__name")
    ordering = ("server__owner_id", "server__name", "name")
    list_per_page = 50
    actions = ("accept_definitions",)
    change_form_template = "admin/mcp_servers/mcptool/change_form.html"
    readonly_fields = (
        "server_page",
        "name",
        "exposed_name",
        "title",
        "state",
        "hint_marks",
        "pinned_at",
        "digest",
        "description_text",
        "schema_json",
        "annotations_json",
        "held_at",
        "held_digest",
        "held_description_text",
        "held_schema_json",
        "difference",
        "calls_by_status",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpTool]:
        tool = OuterRef("exposed_name")
        prefix, owner = "server__prefix", "server__owner"
        tools: QuerySet[McpTool] = super().get_queryset(request)
        return tools.annotate(
            calls=calls_counted(tool, prefix, owner, failed=False),
            failures=calls_counted(tool, prefix, owner, failed=True),
        )

    def get_fieldsets(self, request: HttpRequest, obj: McpTool | None = None) -> Any:
        pinned = ("title", "description_text", "schema_json", "annotations_json", "digest")
        fieldsets: list[Any] = [
            (None, {"fields": ("server_page", "name", "exposed_name", "state", "hint_marks")}),
            ("Use", {"fields": ("enabled", "auto")}),
            ("The pinned definition", {"fields": ("pinned_at", *pinned)}),
        ]
        if obj is not None and obj.held:
            held = ("held_at", "held_digest", "difference", "held_description_text")
            fieldsets.append(
                ("The definition held for review", {"fields": (*held, "held_schema_json")})
            )
        fieldsets.append(("Calls", {"fields": ("calls_by_status",)}))
        return fieldsets

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request)
        actions.pop("delete_selected", None)  # a tool goes with its server
        return actions

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: McpTool | None = None) -> bool:
        editable = obj is None or editable_server(obj.server)
        return editable and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: McpTool | None = None) -> bool:
        """Tools are deleted with their server (so whoever may delete that), never alone: a
        deleted tool would be pinned afresh at the next listing, unreviewed."""
        return bool(request.user.has_perm("mcp_servers.delete_mcpserver"))

    def has_accept_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("mcp_servers.change_mcptool"))

    @admin.action(description="Accept the new definition", permissions=["accept"])
    def accept_definitions(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        for tool in queryset.select_related("server").order_by("pk"):
            self.accept(request, tool, tool.held_digest)

    def accept(self, request: HttpRequest, tool: McpTool, digest: str) -> None:
        """Pin the held definition read as `digest`: a person's server's tool is theirs to
        accept, and a definition that changed again since it was read is read again first."""
        if not tool.server.is_site:
            self.message_user(
                request,
                f"{tool.exposed_name} is of a person's own server: only its person accepts a "
                "new definition, on their settings page.",
                messages.WARNING,
            )
            return
        if not tool.held or tool.held_digest != digest:
            self.message_user(
                request,
                f"{tool.exposed_name}: nothing held, or a newer definition is held: read it first.",
                messages.WARNING,
            )
            return
        if accept_held(tool):
            self.log_change(request, tool, f"Accepted the held definition {digest}.")
            self.message_user(request, f"{tool.exposed_name}: the new definition is pinned.")

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:tool_id>/accept/",
                view(require_POST(self.accept_view)),
                name="mcp_servers_mcptool_accept",
            ),
            *super().get_urls(),
        ]

    def accept_view(self, request: HttpRequest, tool_id: int) -> HttpResponse:
        if not self.has_accept_permission(request):
            raise PermissionDenied
        tool = get_object_or_404(McpTool.objects.select_related("server"), pk=tool_id)
        self.accept(request, tool, request.POST.get("digest", ""))
        return HttpResponseRedirect(change_url(tool))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: McpTool | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context |= {
                "tool": obj,
                "can_accept": obj.held
                and obj.server.is_site
                and self.has_accept_permission(request),
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="server", ordering="server__name")
    def server_page(self, tool: McpTool) -> SafeString:
        server = tool.server
        owner = "" if server.owner is None else f" ({server.owner.get_username()}'s)"
        return format_html("{}{}", link(change_url(server), server.name), owner)

    @admin.display(description="state")
    def state(self, tool: McpTool) -> SafeString:
        return tool_state(tool)

    @admin.display(description="hints")
    def hint_marks(self, tool: McpTool) -> SafeString:
        return hints(tool.annotations or {})

    @admin.display(description="calls", ordering="calls")
    def call_count(self, tool: McpTool) -> int:
        return int(getattr(tool, "calls", 0) or 0)

    @admin.display(description="failed", ordering="failures")
    def failure_count(self, tool: McpTool) -> int:
        return int(getattr(tool, "failures", 0) or 0)

    @admin.display(description="description (the server's text, as the model reads it)")
    def description_text(self, tool: McpTool) -> SafeString:
        return as_text(tool.description)

    @admin.display(description="input schema")
    def schema_json(self, tool: McpTool) -> SafeString:
        return pretty_json(tool.input_schema)

    @admin.display(description="annotations")
    def annotations_json(self, tool: McpTool) -> SafeString:
        return pretty_json(tool.annotations)

    @admin.display(description="held description")
    def held_description_text(self, tool: McpTool) -> SafeString:
        return as_text(str((tool.held_definition or {}).get("description") or ""))

    @admin.display(description="held input schema")
    def held_schema_json(self, tool: McpTool) -> SafeString:
        return pretty_json((tool.held_definition or {}).get("input_schema"))

    @admin.display(description="what changed (- pinned, + held)")
    def difference(self, tool: McpTool) -> SafeString:
        return difference(pinned_definition(tool), tool.held_definition or {})

    @admin.display(description="calls by status")
    def calls_by_status(self, tool: McpTool) -> SafeString:
        calls = calls_of(tool.server).filter(tool=tool.exposed_name)
        return status_table(by_status(calls))


def pinned_definition(tool: McpTool) -> dict[str, Any]:
    """The pinned definition in the shape a held one is kept in (pinning.shown)."""
    return {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "annotations": tool.annotations,
    }


def difference(pinned: dict[str, Any], held: dict[str, Any]) -> SafeString:
    """A unified diff of the two definitions, field by field, one line per changed line; each
    line is marked by its sign as well as its colour."""
    lines: list[str] = []
    for key in sorted(pinned.keys() | held.keys()):
        before, after = readable(pinned.get(key)), readable(held.get(key))
        if before != after:
            lines.append(f"@@ {key}")
            changed = difflib.unified_diff(before, after, lineterm="", n=2)
            lines += [line for line in changed if not line.startswith(("---", "+++", "@@"))]
    if not lines:
        return format_html('<span class="loop-none">{}</span>', "No difference.")
    tones = {"+": "loop-added", "-": "loop-removed", "@": "loop-where"}
    return format_html(
        '<pre class="loop-text loop-diff">{}</pre>',
        format_html_join(
            "\n", '<span class="{}">{}</span>', ((tones.get(line[:1], ""), line) for line in lines)
        ),
    )


def readable(value: Any) -> list[str]:
    """A field as lines to compare: text as its lines (long ones wrapped), the rest as JSON."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True)
    lines: list[str] = []
    for line in (text or "").splitlines() or [""]:
        lines += [line[start : start + 100] for start in range(0, max(len(line), 1), 100)]
    return lines


# Connections --------------------------------------------------------------------------------------


class McpConnectionAdmin(AuditAdmin):
    """People's OAuth connections, read-only: who is connected to what and in which state. No
    token, client secret or flow state is on any page (nor in the search)."""

    list_display = (
        "user_name",
        "server_page",
        "state_badge",
        "expires_at",
        "refreshed_at",
        "last_error",
    )
    list_select_related = ("user", "server")
    list_filter = ("state",)
    search_fields = ("user__username", "server__name")
    ordering = ("-updated_at",)
    fields = (
        ("user_name", "server_page", "state_badge"),
        ("expires_at", "refreshed_at", "updated_at"),
        "last_error",
    )
    readonly_fields = ("user_name", "server_page", "state_badge")

    @admin.display(description="person", ordering="user__username")
    def user_name(self, connection: McpConnection) -> SafeString:
        return user_link(connection.user)

    @admin.display(description="server", ordering="server__name")
    def server_page(self, connection: McpConnection) -> SafeString:
        return link(change_url(connection.server), connection.server.name)

    @admin.display(description="state", ordering="state")
    def state_badge(self, connection: McpConnection) -> SafeString:
        tones = {"connected": ("good", "✓"), "reconnect": ("bad", "↻"), "pending": ("quiet", "…")}
        tone, symbol = tones.get(connection.state, ("quiet", "•"))
        return badge(connection.get_state_display(), tone=tone, symbol=symbol)
