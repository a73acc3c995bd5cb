"""Loop's MCP client: one connection per operation (a discovery, a call), on the official SDK.

A connection is short: the SDK negotiates the revision the server offers (the stateless
2026-07-28 one, or the session-based one before it), Loop asks one thing, and the connection
ends. Nothing is kept between calls, so a worker that dies mid-call leaves nothing to clean up,
and a run resumed elsewhere connects afresh.

Every HTTP connection goes through the SSRF guard (netguard/ssrf.py), every operation has a
deadline, and every failure is a `ServerFailed` whose message names the server and what went
wrong, never a credential; a call cut off after it was sent is `InDoubt`, for the model to be
told it may have run. Whatever the server says (its answers, its listing, its errors) leaves here
with the credentials Loop sent it blanked out, so a server that echoes its request's headers
cannot hand a person's token or the site's key on, and storable (core.text.storable).
"""

import dataclasses
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from core.results import UNKNOWN_OUTCOME
from core.text import storable
from mcp_servers.results import CLOSE, OPEN, defused
from mcp_servers.secrets import redacted_json, sent_secrets
from netguard.ssrf import UnsafeAddress, UnsafeResponse, guarded_http_client

logger = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# What Loop says it is, to a server's logs.
CLIENT_INFO = types.Implementation(name="loop", version="1")
# A listing longer than this many pages is a server that never ends its cursor.
MAX_PAGES = 20


class ServerFailed(Exception):
    """The server could not be reached or answered badly; the message says which and how."""


class TimedOut(ServerFailed):
    """The server did not answer within the deadline."""


class InDoubt(ServerFailed):
    """The call went out and its answer never came back (the connection dropped, or the deadline
    passed): the server may have done the work, so it is no call to send again as if nothing ran.
    A failure before the call was sent (refused, unresolved, TLS) is a plain ServerFailed."""


class TimedOutInDoubt(TimedOut, InDoubt):
    """The deadline passed after the call was sent."""


class Unauthorized(ServerFailed):
    """The server refused the credentials (HTTP 401): an OAuth token to refresh or reconnect."""


@dataclass(frozen=True)
class Endpoint:
    """How to reach one server for one person. Its headers are secrets: kept out of repr."""

    label: str  # the server's name, for messages
    url: str = ""
    command: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, compare=False)
    allowed: tuple[Network, ...] = ()
    # The one host that may be on any network (a site server's own; netguard.ssrf.admitted_for).
    own_host: str = ""
    seconds: float = 60.0
    max_bytes: int = 4 * 1024 * 1024
    # The revision the server spoke at its last listing: a call speaks it at once, without
    # probing ("": probe, and fall back to the handshake, as a listing always does).
    revision: str = ""

    @property
    def secrets(self) -> tuple[str, ...]:
        """What the server is sent that it must never hand back (its credentials)."""
        return sent_secrets(self.headers)


@dataclass(frozen=True)
class Definition:
    """A tool as the server describes it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


@dataclass(frozen=True)
class Listing:
    definitions: list[Definition]
    protocol_version: str
    server_info: str


@dataclass(frozen=True)
class Answer:
    """A call's result, and whether the server said its tool list changed meanwhile."""

    result: types.CallToolResult
    tools_changed: bool


class _Watch:
    """What the connection saw that the SDK does not pass on: HTTP statuses and notices."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.tools_changed = False
        # The call's request began to go out: from then on a failure leaves the call in doubt.
        self.call_sent = False

    async def request(self, request: httpx2.Request) -> None:
        if _is_call(request):
            request.extensions["trace"] = self._trace

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's progress on the call's request (its documented `trace` extension)."""
        if event.endswith(".send_request_headers.started"):
            self.call_sent = True

    async def response(self, response: httpx2.Response) -> None:
        self.statuses.append(response.status_code)

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed = True
        await anyio.lowlevel.checkpoint()


def list_tools(endpoint: Endpoint) -> Listing:
    """The server's tools, from a fresh connection."""
    return anyio.run(alist_tools, endpoint)


def call_tool(endpoint: Endpoint, name: str, arguments: dict[str, Any]) -> Answer:
    """Call one tool on a fresh connection; a failure to get an answer is ServerFailed (a tool
    that answers with an error is an answer: `result.is_error`)."""
    return anyio.run(acall_tool, endpoint, name, arguments)


async def alist_tools(endpoint: Endpoint) -> Listing:
    watch = _Watch()
    async with _failures(endpoint, watch), _connected(endpoint, watch, "auto") as client:
        definitions = await _all_tools(client)
        info = client.server_info
        named = f"{info.name} {info.version}".strip() if info else ""
        listing = Listing(definitions, client.protocol_version, named[:200])
        return _unsaid_listing(listing, endpoint.secrets)


async def acall_tool(endpoint: Endpoint, name: str, arguments: dict[str, Any]) -> Answer:
    watch = _Watch()
    mode = _mode(endpoint.revision)
    async with _failures(endpoint, watch), _connected(endpoint, watch, mode) as client:
        _skip_output_check(client, name)
        # A stdio server reads the call from its pipe: it is sent once written.
        watch.call_sent = bool(endpoint.command)
        result = await client.call_tool(name, arguments)
        return Answer(_unsaid_result(result, endpoint.secrets), watch.tools_changed)


def _heard(value: Any, secrets: Sequence[str]) -> Any:
    """What a server said (text, or a JSON value of it) as Loop takes it in: without the
    credentials Loop sent it, and storable (no NUL, no lone surrogate)."""
    return storable(redacted_json(value, secrets))


def _unsaid_result(result: types.CallToolResult, secrets: Sequence[str]) -> types.CallToolResult:
    said = result.model_dump(mode="json", by_alias=True, exclude_unset=True)
    heard = _heard(said, secrets)
    return result if heard is said else types.CallToolResult.model_validate(heard)


def _unsaid_listing(listing: Listing, secrets: Sequence[str]) -> Listing:
    definitions = [
        Definition(**_heard(definition.as_json(), secrets)) for definition in listing.definitions
    ]
    server_info = _heard(listing.server_info, secrets)
    return dataclasses.replace(listing, definitions=definitions, server_info=server_info)


def _skip_output_check(client: Client, name: str) -> None:
    """Loop reads a result's content blocks, not its structured content, so the SDK's check of
    structured content against the tool's output schema is skipped: on a fresh connection it
    costs a whole listing after every call (a second round trip; six requests in all on a
    session-based server)."""
    client.session._tool_output_schemas.setdefault(name, None)


async def _all_tools(client: Client) -> list[Definition]:
    definitions: list[Definition] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        definitions.extend(_definition(tool) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return definitions
    raise ServerFailed(f"its tool list did not end after {MAX_PAGES} pages")


def _definition(tool: types.Tool) -> Definition:
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else {}
    return Definition(
        name=tool.name,
        title=tool.title or annotations.get("title") or "",
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        annotations=annotations,
    )


def _mode(revision: str) -> str:
    if revision in MODERN_PROTOCOL_VERSIONS:
        return revision
    return "legacy" if revision in HANDSHAKE_PROTOCOL_VERSIONS else "auto"


@asynccontextmanager
async def _connected(endpoint: Endpoint, watch: _Watch, mode: str) -> AsyncIterator[Client]:
    with anyio.fail_after(endpoint.seconds):
        async with Client(
            _transport(endpoint, watch),
            mode=mode,
            client_info=CLIENT_INFO,
            message_handler=watch.message,
            read_timeout_seconds=endpoint.seconds,
            cache=None,
        ) as client:
            yield client


def _transport(endpoint: Endpoint, watch: _Watch) -> Any:
    if endpoint.command:
        command, *arguments = endpoint.command
        return StdioServerParameters(command=command, args=list(arguments), env={})
    http = guarded_http_client(
        headers=endpoint.headers,
        timeout=endpoint.seconds,
        allowed=endpoint.allowed,
        max_response_bytes=endpoint.max_bytes,
        own_host=endpoint.own_host,
    )
    http.event_hooks["request"].append(watch.request)
    http.event_hooks["response"].append(watch.response)
    return streamable_http_client(endpoint.url, http_client=http)


@asynccontextmanager
async def _failures(endpoint: Endpoint, watch: _Watch) -> AsyncIterator[None]:
    """Whatever the SDK, the network or the server raise, as one ServerFailed that says what
    happened in a sentence a person (and the model) can act on."""
    try:
        yield
    except ServerFailed:
        raise
    except Exception as error:  # the SDK's task groups wrap errors in groups
        if 401 in watch.statuses:
            raise Unauthorized(f"{endpoint.label} refused Loop's credentials (HTTP 401)") from None
        cause = _cause(error)
        failure = _failure_type(cause, in_doubt=watch.call_sent and _lost(cause, watch.statuses))
        said = _described(endpoint, cause, watch.statuses, failure)
        raise failure(_heard(said, endpoint.secrets)) from None


# The connection's end or the deadline, as the network, anyio's streams (a stdio server's pipe)
# and the deadline raise them.
_LOST = (
    TimeoutError,
    httpx2.TransportError,
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)


def _is_call(request: httpx2.Request) -> bool:
    """Whether the request carries a tools/call (the SDK posts each JSON-RPC message alone)."""
    if request.method != "POST":
        return False
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return False
    return isinstance(message, dict) and message.get("method") == "tools/call"


def _lost(error: BaseException, statuses: Sequence[int]) -> bool:
    """Whether the error is the connection's end or the deadline, not an answer of the server's
    (an HTTP error status, a protocol error, something that is not MCP, an answer too large)."""
    if isinstance(error, MCPError):
        # The SDK's own words for a stream that ended, or a wait that ended, before the answer.
        answered = any(status >= 400 for status in statuses)
        return not answered and error.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)
    return isinstance(error, _LOST)


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, TimeoutError | httpx2.TimeoutException) or (
        isinstance(error, MCPError) and error.code == types.REQUEST_TIMEOUT
    )


def _failure_type(error: BaseException, *, in_doubt: bool) -> type[ServerFailed]:
    if in_doubt:
        return TimedOutInDoubt if _timed_out(error) else InDoubt
    return TimedOut if isinstance(error, TimeoutError | httpx2.TimeoutException) else ServerFailed


def _cause(error: BaseException) -> BaseException:
    """The error that matters inside the groups anyio's task groups wrap it in."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _described(
    endpoint: Endpoint, error: BaseException, statuses: Sequence[int], failure: type[ServerFailed]
) -> str:
    if issubclass(failure, InDoubt):
        return f"{_described_lost(endpoint, error)}; {UNKNOWN_OUTCOME}"
    name = endpoint.label
    if isinstance(error, TimeoutError):
        return f"{name} did not answer within {endpoint.seconds:g} seconds"
    if isinstance(error, UnsafeAddress | UnsafeResponse):
        return f"{name}: {error}"
    if isinstance(error, httpx2.TimeoutException):
        return f"{name} did not answer in time ({type(error).__name__})"
    if isinstance(error, httpx2.TransportError):
        return f"{name} could not be reached ({type(error).__name__}: {_short(error)})"
    failed = [status for status in statuses if status >= 400]
    if failed:
        return f"{name} answered HTTP {failed[-1]}"
    if isinstance(error, MCPError) and error.code == types.PARSE_ERROR:
        return f"{name} answered something that is not MCP (it could not be parsed)"
    if isinstance(error, MCPError):
        return f"{name} answered with an error: {_quoted(error)}"
    if isinstance(error, ValidationError):
        return f"{name} answered something that is not MCP ({error.error_count()} problems)"
    logger.warning("MCP server %s failed: %r", name, error)
    return f"{name} failed: {type(error).__name__}: {_short(error)}"


def _described_lost(endpoint: Endpoint, error: BaseException) -> str:
    """A call that went out and whose answer never came: never "could not be reached", which
    would invite sending it again."""
    name = endpoint.label
    if _timed_out(error):
        return f"{name} did not answer within {endpoint.seconds:g} seconds"
    # An MCPError's words may be the server's own (its codes are a server's to use too): never
    # quoted outside a delimited block.
    why = "it ended before the answer" if isinstance(error, MCPError) else _short(error)
    return (
        f"{name}: the connection was lost after the call was sent ({type(error).__name__}: {why})"
    )


def _quoted(error: MCPError) -> str:
    """The server's own words (or the SDK's quoting of them), which may say anything: delimited
    as its answers are, so a server cannot speak to the model outside its block."""
    return f"its message (untrusted text):\n{OPEN}\n{defused(_short(error))}\n{CLOSE}"


def _short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
