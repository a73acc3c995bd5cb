"""`manage.py mcpcheck NAME|URL`: does an MCP server work for Loop? It connects the way a run's
call does (the official SDK, the SSRF guard, the deadline), says which protocol revision the
server settled on and what the server is, lists its tools (a server of Loop's beside the
definitions it pinned: which a discovery would hold for review, which are new or gone), and
makes one call. Like
`modelcheck`, a command that calls out on purpose; it changes nothing (no discovery recorded, no
tool pinned, no image kept), and it never prints a credential: header values, a bearer token and
a URL's query and password are masked wherever they would show."""

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

import httpx2
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q, QuerySet

from mcp_servers.client import (
    Definition,
    Endpoint,
    Listing,
    ServerFailed,
    Unauthorized,
    call_tool,
    list_tools,
)
from mcp_servers.declared import ensure_declared
from mcp_servers.endpoints import endpoint_for
from mcp_servers.models import CONNECTED, OAUTH, McpConnection, McpServer
from mcp_servers.pinning import compared
from mcp_servers.results import rendered
from netguard.ssrf import ANYWHERE, UnsafeUrl, check_url

NOTHING_TO_CHECK = 2
FAILED = 1

# A tool's description is a line of the listing, not the whole text (it may be long, or poisoned).
DESCRIPTION_CHARS = 100
MASK = "****"
# Shorter values are not credentials, and masking them would garble the output.
SECRET_CHARS = 4
NOT_KEPT = "images are not kept by mcpcheck"
# What a URL's images would be kept under, were they kept (results.rendered names a path).
URL_PREFIX = "mcpcheck"


class Command(BaseCommand):
    help = (
        "Check an MCP server: a site server by its name (or prefix, or the start of its name) "
        "as runs reach it, or a URL (the operator's: private networks allowed, cloud metadata "
        "addresses never). Connect, print the protocol revision the server settled on, what the "
        "server is and its tools (for a server of Loop's, beside the definitions pinned: which "
        "tools a discovery would hold for review, and which are new or gone), and make one "
        "call: --call TOOL --arguments JSON, else the "
        "first read-only tool that needs no arguments. Exit status: 0 works, 1 does not, 2 "
        "nothing to check (no such server or person, an OAuth server without --user, options "
        "that do not go together)."
    )

    # A mistake in LOOP_MCP_SERVERS must not stop the command that says what it is.
    requires_system_checks = ()

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("server", help="A site server's name or prefix, or an MCP URL.")
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar='"NAME: VALUE"',
            help="A request header for a URL (repeatable); its value is never printed.",
        )
        parser.add_argument("--bearer", default="", metavar="TOKEN", help="For a URL.")
        parser.add_argument(
            "--user",
            default="",
            metavar="USERNAME",
            help="Reach the server as this person: their OAuth connection, their own servers.",
        )
        parser.add_argument("--call", default="", metavar="TOOL", help="The tool to call.")
        parser.add_argument(
            "--arguments", default="", metavar="JSON", help="The call's arguments (an object)."
        )
        parser.add_argument(
            "--seconds",
            type=float,
            default=None,
            help="Each operation's deadline (default: the server's, or LOOP_MCP_CALL_SECONDS).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.secrets: list[str] = []
        try:
            self.check_server(options)
        except CommandError as error:
            raise CommandError(self.masked(str(error)), returncode=error.returncode) from None

    def check_server(self, options: dict[str, Any]) -> None:
        target: str = options["server"]
        server = None
        if "://" in target:
            endpoint, prefix = self.url_endpoint(target, options), URL_PREFIX
        else:
            server, user = self.found_server(target, options)
            endpoint, prefix = self.server_endpoint(server, user, options)
        listing = self.listed(endpoint, self.refused_hint(target, endpoint))
        self.show(listing)
        if server is not None:
            self.compare(server, listing)
        chosen = self.chosen_call(listing.definitions, options)
        if chosen is not None:
            # As a run calls after a listing: in the revision the server spoke at it, no probe.
            spoken = replace(endpoint, revision=listing.protocol_version)
            self.make_call(spoken, prefix, *chosen)

    # --- the endpoint ---------------------------------------------------------------------

    def url_endpoint(self, url: str, options: dict[str, Any]) -> Endpoint:
        if options["user"]:
            self.fail("--user goes with a server's name, not a URL.", NOTHING_TO_CHECK)
        headers = self.headers(options["header"], options["bearer"])
        self.secrets.extend(url_secrets(url))
        try:
            check_url(url, ANYWHERE)
        except UnsafeUrl as refused:
            self.fail(f"Loop will not connect there: {refused}", FAILED)
        shown = shown_url(url)
        self.say(f"MCP server at {shown}{sent(headers)}")
        return Endpoint(
            label=shown,
            url=url,
            headers=headers,
            allowed=ANYWHERE,
            seconds=options["seconds"] or float(settings.LOOP_MCP_CALL_SECONDS),
            max_bytes=settings.LOOP_MCP_RESPONSE_BYTES,
        )

    def headers(self, given: Sequence[str], bearer: str) -> dict[str, str]:
        headers: dict[str, str] = {}
        for text in given:
            name, colon, value = text.partition(":")
            if not colon or not name.strip():
                # Not echoed: a header without its colon is still a credential.
                self.fail(
                    '--header takes "Name: value" (one had no name or colon).', NOTHING_TO_CHECK
                )
            headers[name.strip()] = value.strip()
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        self.secrets.extend(headers.values())
        self.secrets.append(bearer)
        return headers

    def found_server(self, name: str, options: dict[str, Any]) -> tuple[McpServer, User | None]:
        """The server named, and the person (--user) it is reached as, if any."""
        if options["header"] or options["bearer"]:
            self.fail(
                "--header and --bearer go with a URL; a server's own credentials are used.",
                NOTHING_TO_CHECK,
            )
        user = self.person(options["user"])
        return self.found(name, user), user

    def server_endpoint(
        self, server: McpServer, user: User | None, options: dict[str, Any]
    ) -> tuple[Endpoint, str]:
        self.say(f"MCP server {server.name} ({self.where(server)}){off(server)}")
        if server.auth == OAUTH and user is None:
            self.fail(self.needs_a_person(server), NOTHING_TO_CHECK)
        try:
            endpoint = endpoint_for(server, user or server.owner, seconds=options["seconds"])
        except Exception as error:  # credentials that cannot be read, a lost OAuth grant
            self.fail(f"{server.name}: {error}", FAILED)
        self.secrets.extend(endpoint.headers.values())
        self.secrets.extend(url_secrets(endpoint.url))
        return endpoint, server.prefix

    def person(self, username: str) -> User | None:
        if not username:
            return None
        User = get_user_model()
        try:
            return User.objects.get_by_natural_key(username)
        except User.DoesNotExist:
            self.fail(f"No user named {username!r}.", NOTHING_TO_CHECK)

    def found(self, name: str, user: User | None) -> McpServer:
        """The server `name` names: a site server (or, with --user, one of theirs) by its name,
        its prefix, or the start of its name when only one has it."""
        try:
            ensure_declared()
        except ImproperlyConfigured as error:
            self.fail(str(error), NOTHING_TO_CHECK)
        candidates = McpServer.objects.filter(Q(owner__isnull=True) | Q(owner=user))
        for lookup in (Q(name__iexact=name), Q(prefix=name), Q(name__istartswith=name)):
            matches: list[McpServer] = list(candidates.filter(lookup)[:10])
            if len(matches) == 1:
                return matches[0]
            if matches:
                names = ", ".join(server.name for server in matches)
                self.fail(f"{name!r} names more than one MCP server: {names}.", NOTHING_TO_CHECK)
        self.fail(f"No MCP server named {name!r}. {listed_servers(candidates)}", NOTHING_TO_CHECK)

    def where(self, server: McpServer) -> str:
        owner = "a site server" if server.is_site else f"{server.owner}'s own"
        target = shown_url(server.url) if server.url else server.target
        return f"{owner}, {target}"

    def needs_a_person(self, server: McpServer) -> str:
        connected = McpConnection.objects.filter(server=server, state=CONNECTED)
        people = sorted(str(connection.user) for connection in connected.select_related("user"))
        who = (
            f"connected: {', '.join(people)}"
            if people
            else "nobody has connected it yet (a person connects it on their MCP settings page)"
        )
        return (
            f"{server.name} signs in with OAuth: Loop reaches it with a person's connection. "
            f"Pass --user USERNAME to use theirs ({who})."
        )

    # --- the listing ----------------------------------------------------------------------

    def refused_hint(self, target: str, endpoint: Endpoint) -> str:
        """What to do when the server refuses the credentials sent (or their absence)."""
        if "://" not in target:
            return " Its credentials need updating (the console, or LOOP_MCP_SERVERS)."
        if endpoint.headers:
            return " Check the token or headers given."
        return " Pass --bearer TOKEN or --header 'Name: value'."

    def listed(self, endpoint: Endpoint, refused_hint: str) -> Listing:
        started = time.monotonic()
        try:
            listing = list_tools(endpoint)
        except Unauthorized as refused:
            self.fail(f"{refused}.{refused_hint}", FAILED)
        except ServerFailed as failed:
            self.fail(f"Could not list the tools: {failed}", FAILED)
        took = time.monotonic() - started
        self.say(f"Protocol revision: {listing.protocol_version or 'not said'}")
        self.say(f"Server: {listing.server_info or 'not said'}")
        self.say(f"Listed {len(listing.definitions)} tools in {took:.2f}s.")
        return listing

    def show(self, listing: Listing) -> None:
        for definition in listing.definitions:
            title = f" ({definition.title})" if definition.title else ""
            said = one_line(definition.description) or "(no description)"
            self.say(f"  {definition.name}{title}: {said}{hints(definition)}")

    def compare(self, server: McpServer, listing: Listing) -> None:
        """The listing beside the definitions Loop pinned: which tools the next discovery would
        hold for review, pin as new, or find gone (this check holds and pins nothing)."""
        changes = compared(server, listing)
        reviewer = "an operator" if server.is_site else f"{server.owner}"
        self.say("Compared with the pinned definitions (nothing is changed by this check):")
        for label, names in (
            (f"would be held for review by {reviewer} (changed since reviewed)", changes.held),
            ("new (would be pinned)", changes.added),
            ("gone (no longer listed)", changes.missing),
            ("refused", [f"{name} ({why})" for name, why in changes.refused.items()]),
        ):
            if names:
                self.say(f"  {label}: {', '.join(names)}")
        if not (changes.held or changes.added or changes.missing or changes.refused):
            self.say("  no change: every listed tool is as pinned.")

    # --- the call -------------------------------------------------------------------------

    def chosen_call(
        self, definitions: list[Definition], options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """The tool to call and its arguments: the one asked for, or the first a check may call
        unasked (read-only by its server's word, needing no arguments); None: no call."""
        if options["call"]:
            return self.asked_call(definitions, options["call"], options["arguments"])
        if options["arguments"]:
            self.fail("--arguments goes with --call TOOL.", NOTHING_TO_CHECK)
        tool = next((each for each in definitions if callable_unasked(each)), None)
        if tool is None:
            self.say(
                "No call made: no tool is marked read-only (readOnlyHint) and takes no required "
                "arguments, and no --call TOOL was given."
            )
            return None
        return tool.name, {}

    def asked_call(
        self, definitions: list[Definition], name: str, raw: str
    ) -> tuple[str, dict[str, Any]]:
        if name not in {definition.name for definition in definitions}:
            self.fail(f"The server lists no tool {name!r}.", FAILED)
        try:
            arguments = json.loads(raw or "{}")
        except ValueError as error:
            self.fail(f"--arguments is not JSON: {error}", NOTHING_TO_CHECK)
        if not isinstance(arguments, dict):
            self.fail("--arguments must be a JSON object.", NOTHING_TO_CHECK)
        return name, arguments

    def make_call(
        self, endpoint: Endpoint, prefix: str, name: str, arguments: dict[str, Any]
    ) -> None:
        shown = f"{name}({json.dumps(arguments, ensure_ascii=False)})"
        started = time.monotonic()
        try:
            answer = call_tool(endpoint, name, arguments)
        except ServerFailed as failed:
            self.fail(f"The call {shown} failed: {failed}", FAILED)
        took = time.monotonic() - started
        text = rendered(
            answer.result, server=endpoint.label, tool=name, prefix=prefix, store=keep_nothing
        ).text
        self.say(f"Called {shown} in {took:.2f}s:")
        self.say(text)
        if answer.result.is_error:
            self.fail(f"{name} answered with an error (shown above).", FAILED)
        self.say(f"{endpoint.label} works.")

    # --- output ---------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.stdout.write(self.masked(text))

    def fail(self, message: str, returncode: int) -> NoReturn:
        raise CommandError(self.masked(message), returncode=returncode)

    def masked(self, text: str) -> str:
        """The text with every credential this check was given or read replaced by ****."""
        for secret in sorted(set(getattr(self, "secrets", [])), key=len, reverse=True):
            if len(secret) >= SECRET_CHARS:
                text = text.replace(secret, MASK)
        return text


def keep_nothing(path: str, data: bytes) -> str:
    """The check's store: it keeps no image (a run keeps them in its person's workspace)."""
    raise RuntimeError(NOT_KEPT)


def callable_unasked(definition: Definition) -> bool:
    required = definition.input_schema.get("required") or []
    annotations = definition.annotations
    return (
        not required
        and annotations.get("read_only_hint") is True
        and annotations.get("destructive_hint") is not True
    )


def hints(definition: Definition) -> str:
    said = [
        label
        for key, label in (("read_only_hint", "read-only"), ("destructive_hint", "destructive"))
        if definition.annotations.get(key) is True
    ]
    return f" [{', '.join(said)}]" if said else ""


def one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def sent(headers: dict[str, str]) -> str:
    if not headers:
        return ""
    return f", sending {', '.join(headers)} (values not shown)"


def off(server: McpServer) -> str:
    return "" if server.enabled else " (disabled: runs do not use it)"


def listed_servers(candidates: QuerySet[McpServer]) -> str:
    names = list(candidates.values_list("name", flat=True)[:20])
    return f"Servers: {', '.join(names)}." if names else "There are none."


def shown_url(url: str) -> str:
    """The URL without its user name, password, query or fragment: any may carry a secret."""
    try:
        parsed = httpx2.URL(url)
        return str(
            httpx2.URL(scheme=parsed.scheme, host=parsed.host, port=parsed.port, path=parsed.path)
        )
    except (httpx2.InvalidURL, TypeError, ValueError):
        return "(a URL that does not parse)"


def url_secrets(url: str) -> list[str]:
    """What of a URL may be a credential: its password and its query's values."""
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError):
        return []
    return [parsed.password or "", *(value for _, value in parsed.params.multi_items())]
