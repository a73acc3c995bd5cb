"""Site servers declared in LOOP_MCP_SERVERS (mcp_servers/declared.py), the start-up checks of
the MCP settings, credentials resealed under a new key (`manage.py rotatecredentials`), and a
person's servers and grants going with their account."""

import io
import json

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.models import Group, User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from accounts.my_data import delete_account
from mcp_servers.checks import mcp_settings
from mcp_servers.declared import declared, ensure_declared, sync
from mcp_servers.models import CONNECTED, ENVIRONMENT, McpConnection, McpServer, McpTool
from mcp_servers.secrets import decrypt, encrypt
from mcp_servers.tools import servers_for
from tests.test_my_data_export import exported, read_json

pytestmark = pytest.mark.django_db

TOKEN = "declared-secret-7781"


def servers_json(*entries: dict[str, object]) -> str:
    return json.dumps(list(entries))


TRACKER = {
    "name": "Tracker",
    "url": "https://mcp.tracker.example.com/mcp",
    "headers": {"Authorization": f"Bearer {TOKEN}"},
    "tools": ["search"],
    "auto": ["search"],
}


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("{", "is not JSON"),
        ('{"name": "x"}', "must be a JSON list"),
        ('["x"]', "entry 1 is not an object"),
        ('[{"url": "https://a.example"}]', "needs a name"),
        ('[{"name": "A"}]', "needs a url or a command"),
        ('[{"name": "A", "url": "https://a", "command": ["x"]}]', "not both"),
        ('[{"name": "A", "url": "https://a", "colour": "red"}]', "unknown keys: colour"),
        ('[{"name": "A", "url": "https://a", "headers": {"X": 1}}]', "headers is an object"),
        ('[{"name": "A", "url": "https://a", "tools": "all"}]', "tools is a list"),
        ('[{"name": "A", "url": "https://a"}, {"name": "A", "url": "https://b"}]', "same name"),
        ('[{"name": "!!!", "url": "https://a"}]', "cannot make a prefix"),
    ],
)
def test_a_malformed_declaration_is_refused_naming_the_entry(raw, said, settings):
    with pytest.raises(ImproperlyConfigured, match=said):
        declared(raw)
    settings.LOOP_MCP_SERVERS = raw
    assert [problem.id for problem in mcp_settings()] == ["mcp_servers.E001"]


def test_the_other_settings_are_checked_at_start(settings):
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["10.0.0.0/8", "not-a-network"]
    settings.LOOP_CREDENTIAL_KEYS = ["not-a-key"]
    ids = sorted(problem.id for problem in mcp_settings())
    assert ids == ["mcp_servers.E002", "mcp_servers.E003"]


def test_declared_servers_become_read_only_rows_with_sealed_headers(settings):
    settings.LOOP_MCP_SERVERS = servers_json(
        TRACKER, {"name": "Files", "command": ["files-mcp"], "groups": ["staff"]}
    )
    ensure_declared()
    tracker = McpServer.objects.get(name="Tracker")
    assert (tracker.source, tracker.prefix, tracker.owner, tracker.everyone) == (
        ENVIRONMENT,
        "tracker",
        None,
        True,
    )
    assert TOKEN not in tracker.sealed_headers
    assert json.loads(decrypt(tracker.sealed_headers)) == TRACKER["headers"]
    files = McpServer.objects.get(name="Files")
    assert (files.command, files.everyone, files.url) == (["files-mcp"], False, "")


def test_the_environment_stays_the_authority(settings):
    settings.LOOP_MCP_SERVERS = servers_json(TRACKER)
    ensure_declared()
    tracker = McpServer.objects.get(name="Tracker")
    McpServer.objects.filter(pk=tracker.pk).update(trust_hints=True, enabled=False)
    sealed = McpServer.objects.get(pk=tracker.pk).sealed_headers
    sync(declared())
    again = McpServer.objects.get(pk=tracker.pk)
    assert (again.trust_hints, again.enabled) == (False, True)
    assert again.sealed_headers == sealed  # unchanged headers are not sealed anew
    settings.LOOP_MCP_SERVERS = "[]"
    ensure_declared()
    assert McpServer.objects.get(pk=tracker.pk).enabled is False  # no longer declared: off


def test_a_declared_servers_groups_decide_who_may_use_it(settings, alice, bob):
    staff = Group.objects.create(name="staff")
    alice.groups.add(staff)
    settings.LOOP_MCP_SERVERS = servers_json(
        {"name": "Inside", "url": "https://inside.example.com/mcp", "groups": ["staff"]}
    )
    assert [server.name for server in servers_for(alice)] == ["Inside"]
    assert list(servers_for(bob)) == []


def test_rotation_reseals_every_credential_under_the_new_key(settings, alice):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.LOOP_CREDENTIAL_KEYS = [old]
    server = McpServer.objects.create(
        name="Mine",
        prefix="mine",
        owner=alice,
        url="https://x.example.com/mcp",
        sealed_headers=encrypt(json.dumps({"Authorization": "Bearer one"})),
    )
    McpConnection.objects.create(
        user=alice, server=server, state=CONNECTED, sealed_tokens=encrypt('{"access": "two"}')
    )
    settings.LOOP_CREDENTIAL_KEYS = [new, old]
    call_command("rotatecredentials", stdout=io.StringIO())
    settings.LOOP_CREDENTIAL_KEYS = [new]  # the old key gone: everything still opens
    server.refresh_from_db()
    assert json.loads(decrypt(server.sealed_headers)) == {"Authorization": "Bearer one"}
    assert decrypt(McpConnection.objects.get().sealed_tokens) == '{"access": "two"}'


def test_rotation_names_what_no_key_opens(settings, alice):
    settings.LOOP_CREDENTIAL_KEYS = [Fernet.generate_key().decode()]
    McpServer.objects.create(name="Mine", prefix="mine", owner=alice, sealed_headers=encrypt("{}"))
    settings.LOOP_CREDENTIAL_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(CommandError, match="1 rows hold a credential no listed key opens"):
        call_command("rotatecredentials", stdout=io.StringIO())


def own_server(user: User) -> McpServer:
    server = McpServer.objects.create(
        name="Mine",
        prefix="mine",
        owner=user,
        url="https://mine.example.com/mcp",
        auth="oauth",
        sealed_headers=encrypt(json.dumps({"X-Key": TOKEN})),
    )
    McpTool.objects.create(
        server=server,
        name="lookup",
        exposed_name="mine__lookup",
        digest="d" * 64,
        pinned_at="2026-12-01T00:00:00Z",
        input_schema={"type": "object"},
    )
    McpConnection.objects.create(
        user=user, server=server, state=CONNECTED, sealed_tokens=encrypt(TOKEN)
    )
    return server


def test_the_export_lists_a_persons_servers_never_their_credentials(alice, as_alice):
    own_server(alice)
    account = read_json(exported(as_alice), "account.json")
    assert account["mcp_servers"] == [
        {
            "name": "Mine",
            "url": "https://mine.example.com/mcp",
            "prefix": "mine",
            "auth": "oauth",
            "created_at": account["mcp_servers"][0]["created_at"],
            "tools": [{"name": "lookup", "enabled": True, "auto": False}],
        }
    ]
    assert TOKEN not in json.dumps(account)


def test_a_deleted_account_takes_its_servers_and_grants_with_it(alice):
    alice.set_password("pw-for-deletion")
    alice.save()
    own_server(alice)
    delete_account(alice, "pw-for-deletion")
    assert not McpServer.objects.exists()
    assert not McpConnection.objects.exists()
    assert not McpTool.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("select count(*) from mcp_servers_mcpserver_users")
        assert cursor.fetchone() == (0,)
