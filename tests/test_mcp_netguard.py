"""The SSRF guard: no request Loop makes to an MCP or OAuth server reaches a non-public address.

"Public" is simulated: a real server listens on 127.0.0.1 and the tests admit 127.0.0.1/32 the
way an operator would, while fake DNS maps `.test` names to the addresses a test needs. Every
refusal is shown to happen before a connection is attempted, by a spy on the socket layer.
"""

import datetime
import gzip
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address, ip_network
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from mcp_servers.networks import private_networks
from netguard import ssrf
from netguard.ssrf import (
    ResponseTooLarge,
    UnsafeAddress,
    UnsafeResponse,
    UnsafeUrl,
    check_url,
    guarded_http_client,
    guarded_sync_client,
    refused_reason,
)

pytestmark = pytest.mark.fast

LOOPBACK = [ip_network("127.0.0.1/32")]
CAP = 10_000


def client(allowed=LOOPBACK, cap=CAP):
    return guarded_http_client(headers=None, timeout=10, allowed=allowed, max_response_bytes=cap)


def sync_client(allowed=LOOPBACK, cap=CAP):
    return guarded_sync_client(headers=None, timeout=10, allowed=allowed, max_response_bytes=cap)


# --- the addresses ---------------------------------------------------------------------------

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("0.0.0.0", "unspecified"),  # noqa: S104
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("192.0.2.1", "special-purpose"),
    ("2001:db8::1", "special-purpose"),
    ("fec0::1", "site-local"),
    ("64:ff9b:1::a00:1", "local-use NAT64"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1, a private"),
    ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254, a cloud metadata"),
    ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1, a loopback"),
    ("::a00:1", "IPv4-compatible form of 10.0.0.1"),
    ("64:ff9b::a00:1", "NAT64 form of 10.0.0.1, a private"),
    ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, a loopback"),
    ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, a cloud metadata"),
    ("2002:a00:1::1", "6to4 form of 10.0.0.1, a private"),
    ("2002:c0a8:101::1", "6to4 form of 192.168.1.1, a private"),
    ("2002:7f00:1::", "6to4 form of 127.0.0.1, a loopback"),
]


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_every_address_that_is_not_public_is_refused_and_said_why(address, reason):
    assert reason in (refused_reason(ip_address(address), []) or "public")


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_a_public_address_is_admitted(address):
    assert refused_reason(ip_address(address), []) is None


def test_the_allowed_list_admits_private_networks_but_never_a_metadata_address():
    allowed = [ip_network("127.0.0.0/8"), ip_network("169.254.0.0/16"), ip_network("::/0")]

    assert refused_reason(ip_address("127.0.0.1"), allowed) is None
    assert refused_reason(ip_address("::ffff:127.0.0.1"), allowed) is None
    assert refused_reason(ip_address("169.254.1.1"), allowed) is None
    assert refused_reason(ip_address("10.0.0.1"), allowed) == "a private address"
    for metadata in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"):
        assert "metadata" in (refused_reason(ip_address(metadata), allowed) or "admitted")
    everything = [ip_network("0.0.0.0/0"), ip_network("::/0")]
    assert "metadata" in (refused_reason(ip_address("100.100.100.200"), everything) or "")


def test_the_refusal_names_the_host_and_the_reason():
    refusal = UnsafeAddress("127.0.0.1", ip_address("127.0.0.1"), "a loopback address")
    assert str(refusal) == "127.0.0.1 is a loopback address; Loop connects only to public addresses"

    refusal = UnsafeAddress("mcp.test", ip_address("10.0.0.1"), "a private address")
    assert str(refusal).startswith("mcp.test resolves to 10.0.0.1, a private address;")


# --- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://mcp.example.com/", "https or http only"),
        ("file:///etc/passwd", "https or http only"),
        ("javascript:alert(1)", "https or http only"),
        ("https://user:pw@mcp.example.com/", "user name or password"),
        ("https://token@mcp.example.com/", "user name or password"),
        ("https:///mcp", "no host"),
        ("http://127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://2130706433/", "2130706433 resolves to 127.0.0.1, a loopback"),
        ("http://0x7f.1/", "0x7f.1 resolves to 127.0.0.1, a loopback"),
        ("http://127.1/", "127.1 resolves to 127.0.0.1"),
        ("http://0xa9fea9fe/", "169.254.169.254, a cloud metadata"),
        ("http://[::ffff:127.0.0.1]/", "IPv4-mapped form of 127.0.0.1"),
        ("http://[::1]:8000/", "loopback"),
        ("http://0177.0.0.1/", "not a valid URL"),
        ("http://0.0.0.0:8000/", "unspecified"),
    ],
)
def test_a_url_that_can_never_be_fetched_is_refused_with_a_reason(settings, url, says):
    settings.LOOP_MCP_PRIVATE_NETWORKS = []
    with pytest.raises(UnsafeUrl, match=re.escape(says)):
        check_url(url, private_networks())


def test_a_url_on_a_name_or_an_allowed_address_passes_without_looking_anything_up(
    settings, monkeypatch
):
    def no_dns(*args, **kwargs):
        raise AssertionError("check_url looked a name up")

    monkeypatch.setattr(ssrf, "resolve", no_dns)
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.0/8"]

    check_url("https://mcp.example.com/mcp", private_networks())
    check_url("http://mcp.example.com:8080/mcp?x=1", private_networks())
    check_url("https://bücher.example/mcp", private_networks())
    check_url("http://127.0.0.1:8000/mcp", private_networks())
    check_url("http://2130706433:8000/mcp", private_networks())
    with pytest.raises(UnsafeUrl, match="metadata"):
        check_url("http://169.254.169.254/latest/meta-data/", private_networks())


# --- a server to connect to, fake DNS and a spy on the sockets --------------------------------


@dataclass
class Site:
    """A local HTTP server standing in for a public MCP server, and what it was asked."""

    port: int
    requests: list[dict[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    released_by_client: list[bool] = field(default_factory=list)
    sni: list[str | None] = field(default_factory=list)

    def url(self, path, host="127.0.0.1", scheme="http"):
        return f"{scheme}://{host}:{self.port}{path}"


def _handler(site_holder):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            site = site_holder[0]
            site.requests.append(
                {"path": self.path, **{k.lower(): v for k, v in self.headers.items()}}
            )
            route, query = urlsplit(self.path).path, parse_qs(urlsplit(self.path).query)
            getattr(self, "route_" + route.strip("/"))(query)

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def route_ok(self, query):
            self.reply(200, b"ok")

        def route_big(self, query):
            self.reply(200, b"x" * int(query["n"][0]))

        def route_redirect(self, query):
            self.reply(302, headers=[("Location", query["to"][0])])

        def route_gzip(self, query):
            self.reply(200, gzip.compress(b"\0" * 100_000), [("Content-Encoding", "gzip")])

        def route_sse(self, query):
            """Events with no length given, the second only once the client has read the first."""
            site = site_holder[0]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: one\n\n")
            site.released_by_client.append(site.release.wait(30))
            self.wfile.write(b"data: two\n\n")

        def route_flood(self, query):
            """An event stream a hundred times the cap."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for _ in range(CAP // 10):
                    self.wfile.write(b"data: " + b"x" * 1000 + b"\n\n")
            except OSError:
                pass  # the client stopped reading, as it should

    return Handler


@pytest.fixture
def site() -> Iterator[Site]:
    with serving(tls=None) as running:
        yield running


@contextmanager
def serving(tls: ssl.SSLContext | None) -> Iterator[Site]:
    holder: list[Site] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    holder.append(Site(port=server.server_address[1]))
    if tls is not None:
        tls.sni_callback = lambda sock, name, context: holder[0].sni.append(name)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        holder[0].release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def dns(monkeypatch):
    """Fake answers for `.test` names; each name's answers are given in turn, the last repeated."""
    answers: dict[str, list[list[str]]] = {}
    asked: list[str] = []
    real = ssrf.resolve

    def resolve(host, port):
        asked.append(host)
        if host in answers:
            turn = answers[host]
            return [ip_address(a) for a in (turn.pop(0) if len(turn) > 1 else turn[0])]
        if host.endswith(".test"):
            raise socket.gaierror(socket.EAI_NONAME, "no such .test name")
        return real(host, port)  # an address literal or localhost: no DNS query leaves the machine

    monkeypatch.setattr(ssrf, "resolve", resolve)
    return SimpleNamespace(answers=answers, asked=asked)


@pytest.fixture
def connections(monkeypatch):
    """The hosts sockets were opened to, through either httpcore2 backend."""
    opened: list[str] = []
    real_async, real_sync = anyio.connect_tcp, socket.create_connection

    async def connect_tcp(*args, **kwargs):
        opened.append(kwargs["remote_host"])
        return await real_async(*args, **kwargs)

    def create_connection(address, *args, **kwargs):
        opened.append(address[0])
        return real_sync(address, *args, **kwargs)

    monkeypatch.setattr(anyio, "connect_tcp", connect_tcp)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    return opened


# --- connecting ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_allowed_address_is_reached(site, connections):
    async with client() as http:
        response = await http.get(site.url("/ok"))

    assert response.text == "ok"
    assert connections == ["127.0.0.1"]
    assert site.requests[0]["accept-encoding"] == "identity"


@pytest.mark.asyncio
async def test_a_loopback_address_is_refused_before_any_connection(site, connections):
    async with client(allowed=[]) as http:
        with pytest.raises(UnsafeAddress, match=re.escape("127.0.0.1 is a loopback address")):
            await http.get(site.url("/ok"))

    assert connections == []
    assert site.requests == []


@pytest.mark.asyncio
async def test_odd_spellings_of_loopback_are_refused_at_connect_time_too(site, connections):
    async with client(allowed=[]) as http:
        for host in ("2130706433", "0x7f.1", "127.1", "[::ffff:127.0.0.1]"):
            with pytest.raises(UnsafeAddress, match="loopback"):
                await http.get(site.url("/ok", host=host))

    assert connections == []


@pytest.mark.asyncio
async def test_a_name_that_resolves_to_loopback_is_refused(site, dns, connections):
    dns.answers["innocent.test"] = [["127.0.0.1"]]

    async with client(allowed=[]) as http:
        with pytest.raises(UnsafeAddress, match=r"localhost resolves to \S+, a loopback"):
            await http.get(site.url("/ok", host="localhost"))
        with pytest.raises(
            UnsafeAddress, match=re.escape("innocent.test resolves to 127.0.0.1, a loopback")
        ):
            await http.get(site.url("/ok", host="innocent.test"))

    assert connections == []


@pytest.mark.asyncio
async def test_a_dns_answer_mixing_public_and_private_addresses_is_refused(site, dns, connections):
    dns.answers["mixed.test"] = [["127.0.0.1", "10.0.0.1"]]

    async with client() as http:
        with pytest.raises(
            UnsafeAddress, match=re.escape("mixed.test resolves to 10.0.0.1, a private")
        ):
            await http.get(site.url("/ok", host="mixed.test"))

    assert connections == []


@pytest.mark.asyncio
async def test_rebinding_cannot_reach_a_private_address(site, dns, connections):
    """The name is resolved once per connection and the socket opened to the address vetted, so
    an answer that changes after the check (public, then private) is never used."""
    dns.answers["rebind.test"] = [["127.0.0.1"], ["10.0.0.1"]]

    async with client() as http:
        response = await http.get(site.url("/ok", host="rebind.test"))
    async with client() as http:
        with pytest.raises(UnsafeAddress, match=re.escape("10.0.0.1")):
            await http.get(site.url("/ok", host="rebind.test"))

    assert response.text == "ok"
    assert site.requests[0]["host"] == f"rebind.test:{site.port}"
    assert dns.asked == ["rebind.test", "rebind.test"]
    assert connections == ["127.0.0.1"]


@pytest.mark.asyncio
async def test_a_redirect_to_a_refused_address_is_refused(site, dns, connections):
    dns.answers["internal.test"] = [["10.0.0.1"]]

    async with client() as http:
        not_followed = await http.get(site.url("/redirect?to=http://169.254.169.254/"))
        with pytest.raises(
            UnsafeAddress, match=re.escape("169.254.169.254 is a cloud metadata address")
        ):
            await http.get(site.url("/redirect?to=http://169.254.169.254/"), follow_redirects=True)
        with pytest.raises(UnsafeAddress, match=re.escape("internal.test resolves to 10.0.0.1")):
            await http.get(
                site.url("/redirect?to=http://internal.test/latest"), follow_redirects=True
            )

    assert not_followed.status_code == 302
    assert connections == ["127.0.0.1"] * 3
    assert [request["path"] for request in site.requests] == [
        "/redirect?to=http://169.254.169.254/",
        "/redirect?to=http://169.254.169.254/",
        "/redirect?to=http://internal.test/latest",
    ]


@pytest.mark.asyncio
async def test_proxy_settings_in_the_environment_are_ignored(site, monkeypatch):
    with serving(tls=None) as proxy_site:
        for variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(variable, proxy_site.url(""))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)

        async with client() as http:
            response = await http.get(site.url("/ok"))
        async with client(allowed=[]) as http:
            with pytest.raises(UnsafeAddress):
                await http.get(site.url("/ok"))

        assert response.text == "ok"
        assert proxy_site.requests == []
        assert len(site.requests) == 1


# --- what is read ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_response_over_the_cap_fails(site):
    async with client(cap=CAP) as http:
        at_the_cap = await http.get(site.url(f"/big?n={CAP}"))
        with pytest.raises(ResponseTooLarge, match=f"larger than {CAP} bytes"):
            await http.get(site.url(f"/big?n={CAP + 1}"))

    assert len(at_the_cap.content) == CAP


@pytest.mark.asyncio
async def test_the_cap_message_leaves_out_the_query_which_may_hold_a_secret(site):
    async with client(cap=10) as http:
        with pytest.raises(ResponseTooLarge) as refusal:
            await http.get(site.url("/big?n=11&code=secret-oauth-code"))

    assert "secret-oauth-code" not in str(refusal.value)
    assert f"127.0.0.1:{site.port}/big" in str(refusal.value)


@pytest.mark.asyncio
async def test_an_event_stream_flows_as_it_is_read(site):
    """The second event is sent only once the client has read the first: a guard that buffered
    the body before handing it on would never see it."""
    read = b""
    async with client() as http, http.stream("GET", site.url("/sse")) as response:
        async for chunk in response.aiter_bytes():
            read += chunk
            if b"data: one\n\n" in read:
                site.release.set()

    assert read == b"data: one\n\ndata: two\n\n"
    assert site.released_by_client == [True]


@pytest.mark.asyncio
async def test_an_event_stream_fails_at_the_cap(site):
    read: list[bytes] = []
    async with client(cap=CAP) as http, http.stream("GET", site.url("/flood")) as response:
        with pytest.raises(ResponseTooLarge):
            await _read_into(read, response)

    assert len(b"".join(read)) <= CAP, "nothing past the cap reaches the reader"


async def _read_into(read: list[bytes], response: httpx2.Response) -> None:
    async for chunk in response.aiter_bytes():
        read.append(chunk)


@pytest.mark.asyncio
async def test_a_compressed_body_is_refused_as_it_could_expand_past_the_cap(site):
    async with client() as http:
        with pytest.raises(UnsafeResponse, match="gzip-encoded"):
            await http.get(site.url("/gzip"))

    assert site.requests[0]["accept-encoding"] == "identity"


@pytest.mark.asyncio
async def test_headers_given_are_sent_but_cannot_ask_for_compression(site):
    http = guarded_http_client(
        headers={"Authorization": "Bearer t0ken", "Accept-Encoding": "gzip"},
        timeout=10,
        allowed=LOOPBACK,
        max_response_bytes=CAP,
    )
    async with http:
        await http.get(site.url("/ok"))

    assert site.requests[0]["authorization"] == "Bearer t0ken"
    assert site.requests[0]["accept-encoding"] == "identity"


# --- TLS -------------------------------------------------------------------------------------


@pytest.fixture
def tls_site(tmp_path, monkeypatch) -> Iterator[Site]:
    """An https server for mcp.test on 127.0.0.1, its CA trusted through SSL_CERT_FILE."""
    ca_key, ca = _certificate("Loop test CA", None, None)
    key, leaf = _certificate("mcp.test", ca_key, ca)
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    with serving(tls=server_context) as running:
        yield running


def _certificate(name, issuer_key, issuer):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), False)
    return key, builder.sign(issuer_key or key, hashes.SHA256())


@pytest.mark.asyncio
async def test_tls_verifies_the_name_asked_for_not_the_address_connected_to(
    tls_site, dns, connections
):
    dns.answers["mcp.test"] = [["127.0.0.1"]]
    dns.answers["other.test"] = [["127.0.0.1"]]

    async with client() as http:
        response = await http.get(tls_site.url("/ok", host="mcp.test", scheme="https"))
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await http.get(tls_site.url("/ok", host="other.test", scheme="https"))

    assert response.text == "ok"
    assert tls_site.sni[:2] == ["mcp.test", "other.test"]
    assert connections == ["127.0.0.1", "127.0.0.1"]


# --- the blocking client ---------------------------------------------------------------------


def test_the_blocking_client_guards_the_same_way(site, dns, connections):
    dns.answers["internal.test"] = [["10.0.0.1"]]

    with sync_client() as http:
        assert http.get(site.url("/ok")).text == "ok"
        with pytest.raises(UnsafeAddress, match=re.escape("internal.test resolves to 10.0.0.1")):
            http.get(site.url("/ok", host="internal.test"))
        with pytest.raises(UnsafeAddress, match="metadata"):
            http.get(site.url("/redirect?to=http://169.254.169.254/"), follow_redirects=True)
        with pytest.raises(ResponseTooLarge):
            http.get(site.url(f"/big?n={CAP + 1}"))
        with pytest.raises(UnsafeResponse, match="gzip"):
            http.get(site.url("/gzip"))
    with sync_client(allowed=[]) as http, pytest.raises(UnsafeAddress, match="loopback"):
        http.get(site.url("/ok", host="localhost"))

    assert connections == ["127.0.0.1"] * 4
    assert all(request["accept-encoding"] == "identity" for request in site.requests)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
def test_only_the_own_host_may_be_anywhere(site, dns, connections, blocking):
    """A site server's own host (as its operator declared it) reaches the operator's network;
    a redirect to any other private host, whoever named it, is vetted as a person's would be."""
    dns.answers["mcp.internal.test"] = [["127.0.0.1"]]
    own = site.url("/ok", host="MCP.Internal.test")  # in the case a URL may give it
    elsewhere = site.url(
        "/redirect?to=" + site.url("/ok", host="127.0.0.1"), host="mcp.internal.test"
    )

    if blocking:
        with guarded_sync_client(
            headers=None,
            timeout=10,
            allowed=[],
            max_response_bytes=CAP,
            own_host="mcp.internal.test",
        ) as http:
            assert http.get(own).text == "ok"
            with pytest.raises(UnsafeAddress, match=re.escape("127.0.0.1 is a loopback address")):
                http.get(elsewhere, follow_redirects=True)
    else:

        async def fetch():
            async with guarded_http_client(
                headers=None,
                timeout=10,
                allowed=[],
                max_response_bytes=CAP,
                own_host="mcp.internal.test",
            ) as http:
                assert (await http.get(own)).text == "ok"
                with pytest.raises(
                    UnsafeAddress, match=re.escape("127.0.0.1 is a loopback address")
                ):
                    await http.get(elsewhere, follow_redirects=True)

        anyio.run(fetch)

    assert connections == ["127.0.0.1", "127.0.0.1"]  # the own host's twice; 127.0.0.1 never
    assert ssrf.host_of("http://MCP.Internal.test.:8080/mcp") == "mcp.internal.test"


def test_the_blocking_client_ignores_proxy_settings_in_the_environment(site, monkeypatch):
    with serving(tls=None) as proxy_site:
        monkeypatch.setenv("HTTP_PROXY", proxy_site.url(""))
        monkeypatch.setenv("ALL_PROXY", proxy_site.url(""))

        with sync_client() as http:
            assert http.get(site.url("/ok")).text == "ok"

        assert proxy_site.requests == []


def test_the_networks_the_guard_admits_are_read_from_the_settings(settings):
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32", "10.1.0.0/16"]
    assert private_networks() == (ip_network("127.0.0.1/32"), ip_network("10.1.0.0/16"))
    settings.LOOP_MCP_PRIVATE_NETWORKS = []
    assert private_networks() == ()


# --- the MCP SDK over the guarded client -----------------------------------------------------


@pytest.fixture
def mcp_site() -> Iterator[str]:
    """A real MCP server (the SDK's own) over Streamable HTTP on 127.0.0.1; its URL."""
    server = MCPServer("probe")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    app = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning"))
    thread = threading.Thread(target=app.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    started = threading.Event()
    while not app.started and not started.wait(0.02):
        pass
    yield f"http://127.0.0.1:{listening.getsockname()[1]}/mcp"
    app.should_exit = True
    thread.join()
    listening.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_mcp_sdk_talks_through_the_guarded_client(mcp_site, mode):
    """Both the stateless revision and the legacy handshake (with its GET event stream) work."""
    async with client(cap=1_000_000) as http:
        transport = streamable_http_client(mcp_site, http_client=http)
        async with Client(transport, mode=mode) as session:
            tools = await session.list_tools()
            result = await session.call_tool("add", {"a": 2, "b": 3})

    assert [tool.name for tool in tools.tools] == ["add"]
    assert result.structured_content == {"result": 5}


@pytest.mark.asyncio
async def test_the_mcp_sdk_surfaces_a_refusal_in_an_exception_group(mcp_site):
    async with client(allowed=[]) as http:
        with pytest.raises(ExceptionGroup) as refusal:
            async with Client(streamable_http_client(mcp_site, http_client=http)):
                pass

    assert refusal.group_contains(UnsafeAddress, depth=None)
