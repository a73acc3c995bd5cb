"""The SSRF policy: every HTTP request Loop makes to an MCP or OAuth server goes through it.

A person may name any URL, so Loop must not become their way into the site's own network. The
guard vets addresses at connect time, not at URL time: each connection resolves its host once,
refuses if any answer is not public, and connects to the address it vetted. So every redirect,
every DNS answer and every rebinding trick meets the same check, and `check_url` is only the
early, friendly refusal of what can never work. Its bodies are held as every policy's are
(netguard.bodies): nothing compressed, at most a cap read.
"""

import contextlib
import ipaddress
import socket
import ssl
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

import anyio
import anyio.to_thread
import httpcore2
import httpx2

from netguard.bodies import (
    NOTHING_COMPRESSED,
    CappedAsyncStream,
    CappedSyncStream,
    TooLarge,
    content_coding,
)
from netguard.trust import trust_roots

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

# Cloud instance metadata services hand out credentials: never reachable, whatever is allowed.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)

_RFC1918 = tuple(
    ipaddress.ip_network(network)
    for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, RFC 6598
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215, local use
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)

# Every network: what an operator's own server's host may reach (the metadata addresses are
# refused whatever is allowed).
ANYWHERE: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("0.0.0.0/0"),
    ipaddress.ip_network("::/0"),
)


class UnsafeAddress(Exception):
    """A connection refused because its host is, or resolves to, an address that is not public."""

    def __init__(self, host: str, address: IPAddress, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        where = f"{address} is" if host == str(address) else f"{host} resolves to {address},"
        super().__init__(f"{where} {reason}; Loop connects only to public addresses")


class UnsafeUrl(ValueError):
    """A URL Loop will not connect to, whatever its host resolves to."""


class UnsafeResponse(Exception):
    """A response Loop will not read, because it could be made to grow without bound."""


class ResponseTooLarge(UnsafeResponse):
    """A response whose body went past the size cap; reading stopped there."""


def refused_reason(ip: IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """Why Loop may not connect to `ip`, or None when it may.

    `allowed` is the operator's list of networks admitted although not public (an on-premise
    server, a test's 127.0.0.1). An IPv6 form that embeds an IPv4 address is judged by that
    address, since that is where the packets go.
    """
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        form, ipv4 = embedded
        reason = refused_reason(ipv4, allowed)
        return None if reason is None else f"{form} {ipv4}, {reason}"
    if any(ip in network for network in allowed):
        return None
    return _special_use(ip)


def _embedded_ipv4(ip: IPAddress) -> tuple[str, IPv4Address] | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), with its form."""
    if isinstance(ip, IPv4Address):
        return None
    low32 = IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return "an IPv4-mapped form of", ip.ipv4_mapped
    if ip in _NAT64:
        return "a NAT64 form of", low32
    if ip.sixtofour is not None:
        return "a 6to4 form of", ip.sixtofour
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves, not 0.0.0.0/0.0.0.1
        return "an IPv4-compatible form of", low32
    return None


def _special_use(ip: IPAddress) -> str | None:
    """The name of the special-use block `ip` is in, or None for a public address."""
    named = (
        (ip.is_unspecified, "the unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip in _SHARED, "a carrier-grade NAT address"),
        (any(ip in network for network in _RFC1918), "a private address"),
        (ip in _LOCAL_NAT64, "a local-use NAT64 address"),
        (isinstance(ip, IPv6Address) and ip.is_site_local, "a site-local address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a special-purpose address"),
        (not ip.is_global, "not a globally routable address"),
    )
    return next((name for refused, name in named if refused), None)


def check_url(url: str, allowed: Sequence[IPNetwork]) -> None:
    """Refuse, with a message a person can act on, a URL no request will ever be let through to
    (`allowed`: the networks beyond the public internet its connections will admit).

    A name is not looked up here (that is done, and must be done, at each connection); an address
    is judged in every spelling the system resolver accepts (2130706433, 0x7f.1 are 127.0.0.1).
    """
    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as error:
        raise UnsafeUrl(f"That is not a valid URL: {error}") from None
    shown = _said(parsed)
    if parsed.scheme not in ("https", "http"):
        raise UnsafeUrl(f"{shown}: Loop connects to servers over https or http only")
    if parsed.userinfo:
        raise UnsafeUrl(f"{shown} carries a user name or password; give credentials as headers")
    if not parsed.host:
        raise UnsafeUrl(f"{shown} names no host")
    address = _numeric_address(parsed.raw_host.decode("ascii"))
    reason = None if address is None else refused_reason(address, allowed)
    if address is not None and reason is not None:
        raise UnsafeUrl(f"{shown}: {UnsafeAddress(parsed.host, address, reason)}")


def _said(url: httpx2.URL) -> str:
    """The URL as a refusal may quote it: no user name, password or query (where credentials
    hide)."""
    host = url.host or ""
    port = f":{url.port}" if url.port else ""
    return repr(f"{url.scheme}://{host}{port}{url.path}")


def _numeric_address(host: str) -> IPAddress | None:
    """The address `host` spells, as the system resolver reads it, or None when it is a name."""
    try:
        answers = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        return None
    return ipaddress.ip_address(answers[0][4][0])


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for `host` (tests replace this to fake DNS)."""
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(answer[4][0]) for answer in answers]


def host_of(url: str) -> str:
    """The host of `url` as a connection names it (IDNA-encoded, lower case, no brackets)."""
    return _normal_host(httpx2.URL(url).raw_host.decode("ascii"))


def _normal_host(host: str) -> str:
    return host.lower().rstrip(".")


def admitted_for(host: str, allowed: Sequence[IPNetwork], own_host: str) -> Sequence[IPNetwork]:
    """The networks a connection to `host` may reach: every one for `own_host` (a site server's
    own host, as its operator declared it), `allowed` for any other host, whoever named it (a
    redirect, an OAuth metadata document)."""
    return ANYWHERE if own_host and _normal_host(host) == own_host else allowed


def vetted_addresses(host: str, port: int, allowed: Sequence[IPNetwork]) -> list[IPAddress]:
    """The addresses to connect to for `host`: all of them vetted, or UnsafeAddress.

    One refused answer refuses them all: a name that mixes public and private answers is an
    attack or a mistake, and a retry would otherwise reach the private one.
    """
    try:
        addresses = list(dict.fromkeys(resolve(host, port)))
    except (OSError, UnicodeError) as error:
        raise httpcore2.ConnectError(f"{host} does not resolve: {error}") from None
    if not addresses:
        raise httpcore2.ConnectError(f"{host} does not resolve")
    for address in addresses:
        reason = refused_reason(address, allowed)
        if reason is not None:
            raise UnsafeAddress(host, address, reason)
    return addresses


class _GuardedAsyncBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, connecting only to vetted addresses.

    It hands the socket the vetted address, never the name, so nothing resolves the name again
    (DNS rebinding). TLS is unaffected: httpcore2 calls start_tls on the stream returned here
    with the request's own host as server_hostname, so SNI and certificate checks use the name.
    """

    def __init__(self, allowed: Sequence[IPNetwork], own_host: str) -> None:
        self._allowed = tuple(allowed)
        self._own_host = own_host
        self._network = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await anyio.to_thread.run_sync(
                    vetted_addresses,
                    host,
                    port,
                    admitted_for(host, self._allowed, self._own_host),
                    abandon_on_cancel=True,
                )
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"resolving {host} timed out") from None
        *others, last = addresses
        for address in others:
            with contextlib.suppress(httpcore2.ConnectError):
                return await self._network.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
        return await self._network.connect_tcp(
            str(last), port, timeout, local_address, socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("Loop connects to servers over TCP only")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _GuardedSyncBackend(httpcore2.NetworkBackend):
    """The blocking twin of _GuardedAsyncBackend, for requests made from Django views."""

    def __init__(self, allowed: Sequence[IPNetwork], own_host: str) -> None:
        self._allowed = tuple(allowed)
        self._own_host = own_host
        self._network = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        admitted = admitted_for(host, self._allowed, self._own_host)
        *others, last = vetted_addresses(host, port, admitted)
        for address in others:
            with contextlib.suppress(httpcore2.ConnectError):
                return self._network.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
        return self._network.connect_tcp(str(last), port, timeout, local_address, socket_options)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        raise httpcore2.ConnectError("Loop connects to servers over TCP only")


def guarded_http_client(
    *,
    headers: dict[str, str] | None,
    timeout: float,
    allowed: Sequence[IPNetwork],
    max_response_bytes: int,
    own_host: str = "",
) -> httpx2.AsyncClient:
    """An httpx2 client for talking to an MCP or OAuth server, every connection vetted:
    `allowed` are the networks any host may be on beyond the public internet, and `own_host`
    (host_of a site server's URL) the one host that may be anywhere.

    No proxy from the environment (a proxy would connect on Loop's behalf, unvetted), no
    redirects followed by httpx2 (the SDK follows its own, each through a new vetted
    connection), no compressed bodies and at most max_response_bytes read per response.
    """
    transport = _GuardedAsyncTransport(allowed, own_host, max_response_bytes)
    return httpx2.AsyncClient(**_client_options(headers, timeout), transport=transport)


def guarded_sync_client(
    *,
    headers: dict[str, str] | None,
    timeout: float,
    allowed: Sequence[IPNetwork],
    max_response_bytes: int,
    own_host: str = "",
) -> httpx2.Client:
    """The blocking twin of guarded_http_client, for OAuth requests made from Django views."""
    transport = _GuardedSyncTransport(allowed, own_host, max_response_bytes)
    return httpx2.Client(**_client_options(headers, timeout), transport=transport)


def _client_options(headers: dict[str, str] | None, timeout: float) -> dict[str, Any]:
    merged = httpx2.Headers(headers or {})
    # Loop caps the bytes it reads; a compressed body would expand past the cap unseen.
    merged.update(NOTHING_COMPRESSED)
    return {
        "headers": merged,
        "timeout": httpx2.Timeout(timeout),
        "trust_env": False,
        "follow_redirects": False,
    }


def _pool_options(context: ssl.SSLContext) -> dict[str, Any]:
    return {
        "ssl_context": context,
        "max_connections": _LIMITS.max_connections,
        "max_keepalive_connections": _LIMITS.max_keepalive_connections,
        "keepalive_expiry": _LIMITS.keepalive_expiry,
    }


class _GuardedAsyncTransport(httpx2.AsyncHTTPTransport):
    """httpx2's own transport, over a connection pool that connects through the guard."""

    def __init__(
        self, allowed: Sequence[IPNetwork], own_host: str, max_response_bytes: int
    ) -> None:
        context = trust_roots()
        super().__init__(verify=context, trust_env=False, limits=_LIMITS)
        # httpx2 takes no network backend, so the pool it just built (unused) is replaced.
        self._pool = httpcore2.AsyncConnectionPool(
            **_pool_options(context), network_backend=_GuardedAsyncBackend(allowed, own_host)
        )
        self._max_response_bytes = max_response_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        coding = content_coding(response)
        if coding is not None:
            await response.aclose()
            raise _compressed(request.url, coding)
        return _capped(response, request.url, self._max_response_bytes)


class _GuardedSyncTransport(httpx2.HTTPTransport):
    """The blocking twin of _GuardedAsyncTransport."""

    def __init__(
        self, allowed: Sequence[IPNetwork], own_host: str, max_response_bytes: int
    ) -> None:
        context = trust_roots()
        super().__init__(verify=context, trust_env=False, limits=_LIMITS)
        self._pool = httpcore2.ConnectionPool(
            **_pool_options(context), network_backend=_GuardedSyncBackend(allowed, own_host)
        )
        self._max_response_bytes = max_response_bytes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        coding = content_coding(response)
        if coding is not None:
            response.close()
            raise _compressed(request.url, coding)
        return _capped(response, request.url, self._max_response_bytes)


def _compressed(url: httpx2.URL, coding: str) -> UnsafeResponse:
    return UnsafeResponse(
        f"{_shown(url)} sent a {coding}-encoded body though Loop asked for none; "
        "Loop reads only bodies whose size it can cap"
    )


def _capped(response: httpx2.Response, url: httpx2.URL, limit: int) -> httpx2.Response:
    """The response with its body counted as it is read, so a stream (SSE) still flows."""
    stream = response.stream
    too_large = _too_large(url)
    capped: httpx2.AsyncByteStream | httpx2.SyncByteStream = (
        CappedAsyncStream(stream, limit, too_large)
        if isinstance(stream, httpx2.AsyncByteStream)
        else CappedSyncStream(stream, limit, too_large)
    )
    return httpx2.Response(
        status_code=response.status_code,
        headers=response.headers,
        stream=capped,
        extensions=response.extensions,
    )


def _too_large(url: httpx2.URL) -> TooLarge:
    def refused(limit: int) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"{_shown(url)} sent a response larger than {limit} bytes, "
            "the most Loop reads of one response"
        )

    return refused


def _shown(url: httpx2.URL) -> str:
    """The URL without its query, which may carry a secret (an OAuth code, a key)."""
    return str(url.copy_with(query=None, fragment=None))
