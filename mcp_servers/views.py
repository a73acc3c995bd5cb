"""A person's Tools page (/settings/tools/): the site's MCP servers they may use with their
tools, and their own servers, which they add, change, check, connect (OAuth) and remove, and
whose tools they choose and review. Every view of a server finds it among the person's own (or,
to connect, among the OAuth servers they may use): anyone else's is a 404. The work is
mcp_servers/personal.py's; these views adapt it to requests and messages."""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from mcp_servers import oauth, personal
from mcp_servers.forms import ServerForm, ToolChoicesForm
from mcp_servers.models import OAUTH, PENDING, RECONNECT, McpConnection, McpServer, McpTool
from mcp_servers.pinning import accept_held
from mcp_servers.tools import default_ask, destructive
from workspace.query_string import query_text
from workspace.requests import SignedInRequest

PAGE = "mcp_settings"
# The longest value an authorization server's redirect may carry (a code, a state, an error's
# description): RFC 6749 bounds none, and servers' codes run to a few hundred characters.
MAX_CALLBACK_VALUE = 4_096
View = Callable[..., HttpResponse]


@dataclass(frozen=True)
class ToolRow:
    tool: McpTool
    asks: str  # why its calls wait for the person ("" : they run without asking)
    destructive: bool
    diff: list[personal.DiffLine] = field(default_factory=list)


@dataclass(frozen=True)
class ServerRow:
    server: McpServer
    tools: list[ToolRow]
    connection: McpConnection | None

    @property
    def reconnect(self) -> bool:
        return self.connection is not None and self.connection.state == RECONNECT


def rows(servers: QuerySet[McpServer], user: User, *, usable_only: bool) -> list[ServerRow]:
    """Each server with its tools and the person's connection to it: three queries.
    `usable_only`: a site's server's tools its operator enabled and it still lists, those on
    hold too (the Tools link counts them: the page says why they are not offered)."""
    tools = McpTool.objects.order_by("name")
    if usable_only:
        tools = tools.filter(enabled=True, missing_since__isnull=True)
    listed = list(servers.prefetch_related(Prefetch("tools", queryset=tools)))
    connections = {
        connection.server_id: connection
        for connection in McpConnection.objects.filter(user=user, server__in=listed)
    }
    return [
        ServerRow(
            server,
            [_tool_row(tool, server) for tool in server.tools.all()],
            connections.get(server.pk),
        )
        for server in listed
    ]


def _tool_row(tool: McpTool, server: McpServer) -> ToolRow:
    tool.server = server  # already read: default_ask names it
    diff = personal.held_diff(tool) if tool.held else []
    return ToolRow(tool, default_ask(tool), destructive(tool), diff)


def _page(request: SignedInRequest, form: ServerForm) -> HttpResponse:
    user = request.user
    context = {
        "form": form,
        "personal_allowed": personal.personal_allowed(),
        "site": rows(personal.site_servers(user), user, usable_only=True),
        "own": rows(personal.own_servers(user), user, usable_only=False),
    }
    return render(request, "mcp_servers/tools.html", context)


@require_http_methods(["GET", "POST"])
def tools_settings(request: SignedInRequest) -> HttpResponse:
    """The page; a POST adds a server of the person's own and lists its tools."""
    if request.method != "POST":
        return _page(request, ServerForm())
    form = ServerForm(request.POST)
    if not personal.personal_allowed():
        messages.error(request, "This site does not allow servers of your own.")
        return redirect(PAGE)
    if form.is_valid():
        try:
            server = personal.add_server(request.user, form.given())
        except personal.Refused as refused:
            form.add_error(None, str(refused))
        else:
            messages.success(request, f"Added {server.name}.")
            _list_tools(request, server)
            return redirect(PAGE)
    return _page(request, form)


def _list_tools(request: SignedInRequest, server: McpServer) -> None:
    """Discovery now, its outcome said in a message; an OAuth server waits for its grant."""
    if server.auth == OAUTH and not _connected(request.user, server):
        messages.info(
            request, f"Connect {server.name} to sign in there; then Loop lists its tools."
        )
        return
    try:
        checked = personal.check(server, request.user)
    except personal.Refused as refused:
        messages.error(request, str(refused))
        return
    if checked.changes is None:
        messages.error(request, f"{server.name}: {checked.message}")
    else:
        messages.success(request, f"{server.name}: {checked.message}")


def _connected(user: User, server: McpServer) -> bool:
    connections = McpConnection.objects.filter(user=user, server=server)
    return bool(connections.exclude(state=PENDING).exists())


def server_from(
    select: Callable[[User], QuerySet[McpServer]],
) -> Callable[[View], View]:
    """The view gets the server named in its URL from among those `select` gives the person;
    any other id is a 404, whatever the method (so nothing tells another person's apart)."""

    def decorator(view: View) -> View:
        @wraps(view)
        def with_server(request: SignedInRequest, server_id: int, **kwargs: Any) -> HttpResponse:
            server = get_object_or_404(select(request.user), pk=server_id)
            return view(request, server, **kwargs)

        return with_server

    return decorator


own = server_from(personal.own_servers)


@own
@require_http_methods(["GET", "POST"])
def server_settings(request: SignedInRequest, server: McpServer) -> HttpResponse:
    """One of the person's servers, changed."""
    form = ServerForm(request.POST if request.method == "POST" else None, server=server)
    if request.method == "POST" and form.is_valid():
        try:
            personal.update_server(server, form.given())
        except personal.Refused as refused:
            form.add_error(None, str(refused))
        else:
            messages.success(request, f"Saved {server.name}.")
            _list_tools(request, server)
            return redirect(PAGE)
    return render(request, "mcp_servers/server.html", {"form": form, "server": server})


@own
@require_POST
def check_server(request: SignedInRequest, server: McpServer) -> HttpResponse:
    _list_tools(request, server)
    return redirect(PAGE)


@own
@require_POST
def delete_server(request: SignedInRequest, server: McpServer) -> HttpResponse:
    name = server.name
    personal.delete_server(server)
    messages.success(request, f"Removed {name}, its tools and any connection to it.")
    return redirect(PAGE)


@own
@require_POST
def tool_choices(request: SignedInRequest, server: McpServer) -> HttpResponse:
    tools = list(server.tools.all())
    form = ToolChoicesForm(request.POST, tools=tools)
    if not form.is_valid():
        messages.error(request, "Those are not this server's tools.")
        return redirect(PAGE)
    enabled, auto = set(form.cleaned_data["enabled"]), set(form.cleaned_data["auto"])
    changed = personal.set_choices(server, enabled, auto)
    messages.success(request, f"Saved {server.name}'s tools ({changed} changed).")
    return redirect(PAGE)


@own
@require_POST
def accept_tool(request: SignedInRequest, server: McpServer, tool_id: int) -> HttpResponse:
    tool = get_object_or_404(McpTool, pk=tool_id, server=server)
    if accept_held(tool):
        messages.success(
            request, f"Accepted the new definition of {tool.name}: it is offered again."
        )
    else:
        messages.info(request, f"{tool.name} has no change waiting for review.")
    return redirect(PAGE)


connectable = server_from(personal.connectable)


def _callback_uri(request: SignedInRequest) -> str:
    return str(request.build_absolute_uri(reverse("mcp_oauth_callback")))


@connectable
@require_POST
def connect(request: SignedInRequest, server: McpServer) -> HttpResponse:
    """The start of the OAuth sign-in: a page that sends the browser to the server's
    authorization page (a redirect answering a form would break the page's form-action policy)."""
    if server.owner_id is not None and not personal.personal_allowed():
        messages.error(request, "This site no longer allows servers of your own.")
        return redirect(PAGE)
    try:
        authorization_url = oauth.start(server, request.user, _callback_uri(request))
    except oauth.OAuthFailed as failed:
        messages.error(request, f"Could not connect {server.name}: {failed}")
        return redirect(PAGE)
    context = {"server": server, "authorization_url": authorization_url}
    return render(request, "mcp_servers/connect.html", context)


@connectable
@require_POST
def disconnect(request: SignedInRequest, server: McpServer) -> HttpResponse:
    oauth.disconnect(server, request.user)
    messages.success(request, f"Disconnected {server.name}: Loop forgot its tokens.")
    return redirect(PAGE)


def callback_value(request: SignedInRequest, name: str) -> str:
    return query_text(request, name, MAX_CALLBACK_VALUE)


@require_GET
def oauth_callback(request: SignedInRequest) -> HttpResponse:
    """Where the authorization server sends the browser back: the grant finished for this
    person (the state names their flow), then their server's tools listed."""
    state, code = callback_value(request, "state"), callback_value(request, "code")
    refused = callback_value(request, "error")
    if refused:
        _say_refused(request, refused, oauth.abandon(request.user, state))
        return redirect(PAGE)
    # RFC 9207: the issuer the browser came back from, checked against the flow's.
    issuer = callback_value(request, "iss") if "iss" in request.GET else None
    try:
        server = oauth.finish(request.user, state, code, _callback_uri(request), iss=issuer)
    except oauth.OAuthFailed as failed:
        messages.error(request, f"Could not connect: {failed}")
        return redirect(PAGE)
    messages.success(request, f"Connected {server.name}.")
    _list_tools(request, server)
    return redirect(PAGE)


def _say_refused(request: SignedInRequest, refused: str, server: McpServer | None) -> None:
    """The authorization server's words only for a sign-in this person has in progress: any
    other link to the callback may carry any text, shown on Loop's own page as if it were
    Loop's."""
    if server is None:
        messages.error(
            request, "That sign-in was not one Loop started for you: nothing was connected."
        )
        return
    said = callback_value(request, "error_description")[:300]
    messages.error(request, f"{server.name} did not grant access: {refused[:100]} {said}".strip())
