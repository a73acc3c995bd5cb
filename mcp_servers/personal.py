"""A person's own MCP servers: added, changed, checked and removed by that person alone, only on
hosts the operator's LOOP_MCP_PERSONAL_HOSTS admits and never at an address Loop must not reach.

The address is checked twice: here, when the person saves the URL (a refusal they can act on),
and by the SSRF guard at every connection (netguard/ssrf.py), since a name may resolve
elsewhere later and a server may redirect. Credentials are sealed as they are saved and never
read back into a page. Only the server's owner reviews its held tools and chooses which run.
"""

import difflib
import json
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

import httpcore2
import httpx2
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from mcp_servers.declared import ensure_declared
from mcp_servers.discovery import DiscoveryFailed, discover
from mcp_servers.endpoints import headers_of
from mcp_servers.models import (
    HEADERS,
    NO_AUTH,
    OAUTH,
    PERSON,
    PREFIX_CHARS,
    McpConnection,
    McpServer,
    McpTool,
    prefix_validator,
)
from mcp_servers.networks import host_admitted, private_networks
from mcp_servers.pinning import Changes
from mcp_servers.secrets import encrypt
from mcp_servers.tools import destructive, open_to
from memory.tools import REMEMBER
from netguard import ssrf
from tools.registry import BUILTIN_TOOLS

# How a person gives credentials; `bearer` is stored as an Authorization header.
BEARER = "bearer"
AUTH_MODES = [
    (NO_AUTH, "None"),
    (BEARER, "Bearer token"),
    (HEADERS, "Headers"),
    (OAUTH, "OAuth (sign in at the server)"),
]
# Headers Loop's client sets itself: a person's value would break or smuggle the request.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "accept",
        "accept-encoding",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
MAX_HEADERS = 20
HEADER_VALUE_CHARS = 4096
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token
# A person's server may not wear the name of one of Loop's own tools.
BUILT_IN_NAMES = frozenset(tool.name for tool in (*BUILTIN_TOOLS, REMEMBER))
DIFF_WIDTH = 88


class Refused(Exception):
    """What the person asked cannot be done; the message says why, in words they can act on."""


def personal_allowed() -> bool:
    """Whether the operator lets people add servers of their own at all."""
    return bool(settings.LOOP_MCP_PERSONAL_HOSTS)


def check_url(url: str) -> None:
    """Refuse a URL a person may not use: not allowed at all, malformed, a host the operator's
    list does not admit, or an address (as written, or as the name resolves now) that is not
    public and not in LOOP_MCP_PRIVATE_NETWORKS. Cloud metadata addresses are always refused."""
    if not personal_allowed():
        raise Refused("This site does not allow servers of your own.")
    try:
        ssrf.check_url(url, private_networks())
    except ssrf.UnsafeUrl as error:
        raise Refused(str(error)) from None
    parsed = httpx2.URL(url)
    host = parsed.raw_host.decode("ascii")  # an international name in its DNS form
    if not host_admitted(host, settings.LOOP_MCP_PERSONAL_HOSTS):
        raise Refused(f"{parsed.host} is not among the hosts this site allows for your servers.")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        ssrf.vetted_addresses(host, port, private_networks())
    except (ssrf.UnsafeAddress, httpcore2.ConnectError) as error:
        raise Refused(str(error)) from None


def prefix_from(name: str) -> str:
    """The prefix a name suggests: lower case, runs of anything else as one underscore."""
    prefix = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return prefix[:PREFIX_CHARS].strip("_")


def check_prefix(user: User, prefix: str) -> None:
    """Refuse a prefix the model could not tell from another tool's: a site server's, another
    of the person's servers', or the name of one of Loop's own tools."""
    try:
        prefix_validator(prefix)
    except ValidationError:
        raise Refused(
            f"{prefix!r} cannot be a prefix: lower-case letters and digits, joined by single "
            "underscores, starting with a letter."
        ) from None
    if prefix in BUILT_IN_NAMES:
        raise Refused(f"{prefix!r} is the name of one of Loop's own tools; choose another prefix.")
    taken = McpServer.objects.filter(prefix=prefix, owner__isnull=True)
    mine = McpServer.objects.filter(prefix=prefix, owner=user)
    if taken.exists() or mine.exists():
        raise Refused(f"The prefix {prefix!r} is taken by another server; choose another.")


def parse_headers(text: str) -> dict[str, str]:
    """The headers of a person's lines of the form `Name: value`; empty lines are skipped."""
    headers: dict[str, str] = {}
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_HEADERS:
        raise Refused(f"At most {MAX_HEADERS} headers.")
    for number, line in enumerate(lines, start=1):
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _HEADER_NAME.match(name) or not value:
            raise Refused(f"Line {number} is not a header: write it as “Name: value”.")
        if name.lower() in RESERVED_HEADERS:
            raise Refused(f"Loop sets the {name} header itself; leave it out.")
        if len(value) > HEADER_VALUE_CHARS or not value.isprintable():
            raise Refused(f"The value of {name} is too long or holds control characters.")
        headers[name] = value
    return headers


def bearer_headers(token: str) -> dict[str, str]:
    token = token.strip()
    if not token or len(token) > HEADER_VALUE_CHARS or not token.isprintable() or " " in token:
        raise Refused("A bearer token is one word of printable characters.")
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Given:
    """What the person gave for one server. An empty `secret` keeps the credentials stored,
    when they are of the same kind."""

    name: str
    url: str
    auth: str  # one of AUTH_MODES
    prefix: str = ""
    secret: str = field(default="", repr=False)


def auth_mode(server: McpServer) -> str:
    """The mode a server's stored credentials are in, as the form offers it."""
    if server.auth != HEADERS:
        return str(server.auth)
    headers = headers_of(server)
    if list(headers) == ["Authorization"] and headers["Authorization"].startswith("Bearer "):
        return BEARER
    return HEADERS


def _sealed(given: Given, server: McpServer | None) -> str:
    """The credentials to store: the new ones sealed, or the stored ones kept when none are
    given, the mode is unchanged and the server's origin is too (a new host gets no old token)."""
    if given.auth in (NO_AUTH, OAUTH):
        return ""
    if given.secret.strip():
        headers = (
            bearer_headers(given.secret) if given.auth == BEARER else parse_headers(given.secret)
        )
        return encrypt(json.dumps(headers))
    if server is None or not server.sealed_headers or auth_mode(server) != given.auth:
        what = "token" if given.auth == BEARER else "headers"
        raise Refused(f"Give the {what} for this server.")
    if _origin(server.url) != _origin(given.url):
        raise Refused("The server's address changed: give its credentials again.")
    return str(server.sealed_headers)


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = httpx2.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def _stored_auth(mode: str) -> str:
    return HEADERS if mode == BEARER else mode


def add_server(user: User, given: Given) -> McpServer:
    """A new server of `user`'s, its URL and prefix checked and its credentials sealed."""
    check_url(given.url)
    prefix = given.prefix or prefix_from(given.name)
    check_prefix(user, prefix)
    sealed = _sealed(given, None)
    try:
        with transaction.atomic():
            server: McpServer = McpServer.objects.create(
                owner=user,
                source=PERSON,
                name=given.name,
                url=given.url,
                prefix=prefix,
                auth=_stored_auth(given.auth),
                sealed_headers=sealed,
            )
            return server
    except IntegrityError:  # the same prefix saved meanwhile, by another tab
        raise Refused(
            f"The prefix {prefix!r} is taken by another server; choose another."
        ) from None


def update_server(server: McpServer, given: Given) -> McpServer:
    """The server changed as the person asked. Its prefix stays (it names the tools their
    conversations allowed); an OAuth grant ends when the address or the mode changes, since its
    tokens were issued for that server."""
    check_url(given.url)
    sealed = _sealed(given, server)
    moved = given.url != server.url or _stored_auth(given.auth) != server.auth
    with transaction.atomic():
        if moved:
            McpConnection.objects.filter(server=server).delete()
        server.name = given.name
        server.url = given.url
        server.auth = _stored_auth(given.auth)
        server.sealed_headers = sealed
        server.save(update_fields=["name", "url", "auth", "sealed_headers"])
    return server


def delete_server(server: McpServer) -> None:
    """The server gone, with its tools and every connection to it (the database cascades)."""
    server.delete()


def own_servers(user: User) -> QuerySet[McpServer]:
    return McpServer.objects.filter(owner=user).order_by("name", "pk")


def site_servers(user: User) -> QuerySet[McpServer]:
    """The site's servers `user` may use, OAuth ones they have not connected included (they
    connect them here). Those declared in LOOP_MCP_SERVERS are brought in first."""
    ensure_declared()
    return McpServer.objects.filter(open_to(user), enabled=True).distinct().order_by("name")


def connectable(user: User) -> QuerySet[McpServer]:
    """The OAuth servers `user` may connect: their own, and the site's open to them."""
    mine_or_open = Q(owner=user) | (open_to(user) & Q(enabled=True))
    return McpServer.objects.filter(mine_or_open, auth=OAUTH).distinct()


@dataclass(frozen=True)
class Checked:
    """What a discovery found, or why it could not list the tools."""

    changes: Changes | None
    error: str = ""
    site: bool = False  # a site server's held changes are its operator's to review

    @property
    def message(self) -> str:
        if self.changes is None:
            return f"Could not list its tools: {self.error}"
        return found_message(self.changes, self.site)


def check(server: McpServer, user: User) -> Checked:
    """Discovery now, as `user` (an OAuth server's tokens are theirs)."""
    if server.owner_id is not None and not personal_allowed():
        raise Refused("This site no longer allows servers of your own.")
    try:
        return Checked(discover(server, user), site=server.is_site)
    except DiscoveryFailed as failed:
        return Checked(None, str(failed), site=server.is_site)


def found_message(changes: Changes, site: bool = False) -> str:
    reviewer = "the operator's" if site else "your"
    parts = []
    if changes.added:
        parts.append(f"new tools: {', '.join(changes.added)}")
    if changes.held:
        parts.append(f"changed, held for {reviewer} review: {', '.join(changes.held)}")
    if changes.missing:
        parts.append(f"no longer listed: {', '.join(changes.missing)}")
    if changes.refused:
        parts.append(f"not offered: {'; '.join(f'{n} ({w})' for n, w in changes.refused.items())}")
    return "Listed its tools: " + ("; ".join(parts) if parts else "nothing changed") + "."


def set_choices(server: McpServer, enabled: set[int], auto: set[int]) -> int:
    """The person's choice of which of their server's tools are offered and which run without
    asking; a destructive tool always asks, so its `auto` is not kept. Says how many changed."""
    changed = 0
    with transaction.atomic():
        for tool in McpTool.objects.select_for_update().filter(server=server):
            wanted = (tool.pk in enabled, tool.pk in auto and not destructive(tool))
            if (tool.enabled, tool.auto) != wanted:
                tool.enabled, tool.auto = wanted
                tool.save(update_fields=["enabled", "auto"])
                changed += 1
    return changed


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "same", "removed", "added", "gap"
    text: str


def pinned_definition(tool: McpTool) -> dict[str, Any]:
    return {
        "title": tool.title,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "annotations": tool.annotations,
    }


def readable(definition: dict[str, Any]) -> list[str]:
    """A definition as lines a person can compare: the description wrapped, the rest as JSON."""
    lines = [f"title: {definition.get('title') or ''}", "description:"]
    for paragraph in str(definition.get("description") or "").splitlines() or [""]:
        lines += ["  " + line for line in textwrap.wrap(paragraph, DIFF_WIDTH) or [""]]
    for key in ("input_schema", "annotations"):
        lines.append(f"{key}:")
        text = json.dumps(definition.get(key) or {}, indent=2, sort_keys=True, ensure_ascii=False)
        lines += ["  " + line for line in text.splitlines()]
    return lines


def held_diff(tool: McpTool) -> list[DiffLine]:
    """The pinned definition beside the held one, line by line, with three lines of context."""
    before = readable(pinned_definition(tool))
    after = readable(tool.held_definition or {})
    lines: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        if lines:
            lines.append(DiffLine("gap", "…"))
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [DiffLine("same", line) for line in before[a1:a2]]
                continue
            lines += [DiffLine("removed", line) for line in before[a1:a2]]
            lines += [DiffLine("added", line) for line in after[b1:b2]]
    return lines
