"""The migrations that moved a model between apps carry an existing site's data and grants: a
database made before the move ends as one made after it."""

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db

MOVE_TOOL_EXECUTIONS = importlib.import_module(
    "agent.migrations.0006_tool_executions_are_run_records"
)
PLAIN_RUN_ID = importlib.import_module("memory.migrations.0004_source_run_is_a_plain_id")
GRANT_SERVER = importlib.import_module("agent.migrations.0019_tool_grant_server")


def run_step(step, state=apps) -> None:
    """`state`: the app registry the step reads its models from (the project's, or as of a
    migration: `as_of`)."""
    with connection.schema_editor() as schema_editor:
        step(state, schema_editor)


def as_of(app: str, migration: str):
    """The models as they stood once `app`'s `migration` was applied."""
    return MigrationExecutor(connection).loader.project_state((app, migration)).apps


def test_an_operator_group_keeps_its_grant_on_tool_executions_after_the_move():
    """A site from before the move has the content type under tools, and a group granted
    tools.view_toolexecution; after it, the same group may view agent.ToolExecution."""
    ContentType.objects.filter(app_label="agent", model="toolexecution").update(app_label="tools")
    old = Permission.objects.get(content_type__app_label="tools", codename="view_toolexecution")
    auditors = Group.objects.create(name="auditors")
    auditors.permissions.add(old)
    run_step(MOVE_TOOL_EXECUTIONS.move_content_type)
    ContentType.objects.clear_cache()
    operator = User.objects.create_user("olga", is_staff=True)
    operator.groups.add(auditors)
    assert operator.has_perm("agent.view_toolexecution")
    assert not ContentType.objects.filter(app_label="tools").exists()


def test_the_move_leaves_a_site_made_after_it_as_it_is():
    before = ContentType.objects.get(app_label="agent", model="toolexecution").pk
    run_step(MOVE_TOOL_EXECUTIONS.move_content_type)
    assert ContentType.objects.get(app_label="agent", model="toolexecution").pk == before


def test_memory_drops_the_foreign_key_an_older_database_has_on_its_run_id():
    """An older database has memory_memory.source_run_id constrained to agent_agentrun; the
    migration drops that constraint and nothing else."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE memory_memory ADD CONSTRAINT memory_source_run_fk "
            "FOREIGN KEY (source_run_id) REFERENCES agent_agentrun (id)"
        )
    run_step(PLAIN_RUN_ID.drop_run_constraints)
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "memory_memory")
    assert not [
        name
        for name, c in constraints.items()
        if c["foreign_key"] and c["columns"] == ["source_run_id"]
    ]
    assert any(c["index"] and c["columns"] == ["source_run_id"] for c in constraints.values())


@pytest.mark.parametrize("table", ["agent_runevent", "tools_toolexecution"])
def test_a_run_s_log_and_audit_rows_are_found_by_run_through_one_index_and_its_key_stays(table):
    """Their own index on run_id went (every row written updated it): an index that starts with
    run_id is still there, for the reads by run and the deletes that cascade from a run, and so
    is the foreign key."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    indexed = [c for c in constraints.values() if c["index"] or c["unique"]]
    by_run = [c for c in indexed if c["columns"][0] == "run_id"]
    assert len(by_run) == 1
    assert len(by_run[0]["columns"]) == 2
    assert [c for c in constraints.values() if c["foreign_key"] and c["columns"] == ["run_id"]]


def test_a_grant_of_an_mcp_tool_is_bound_to_the_server_that_gives_it_now_or_revoked():
    """Grants from before they named a server: each MCP tool's bound to the server whose tool of
    that name its person's runs get (the site's before their own), one no server gives any more
    revoked; Loop's own tools' grants stay as they are."""
    from agent.models import Conversation
    from approvals.models import ToolGrant
    from mcp_servers.models import PERSON, McpServer, McpTool

    alice = User.objects.create_user("alice")
    conversation = Conversation.objects.create(owner=alice, title="grants")
    site = McpServer.objects.create(name="Site", prefix="demo", url="https://a.example/mcp")
    mine = McpServer.objects.create(
        name="Mine", prefix="notes", owner=alice, source=PERSON, url="https://b.example/mcp"
    )
    theirs = McpServer.objects.create(
        name="Mine", prefix="notes", owner=User.objects.create_user("bob"), source=PERSON
    )
    for server, name in ((site, "echo"), (mine, "echo"), (theirs, "echo")):
        McpTool.objects.create(
            server=server,
            name=name,
            exposed_name=f"{server.prefix}__{name}",
            digest="d",
            pinned_at="2026-12-01T00:00:00Z",
        )
    for tool in ("demo__echo", "notes__echo", "gone__echo", "run_code"):
        ToolGrant.objects.create(conversation=conversation, tool=tool)

    run_step(GRANT_SERVER.bind_to_servers, as_of("agent", "0019_tool_grant_server"))

    found = {g.tool: (g.server_id, g.revoked_at is None) for g in ToolGrant.objects.all()}
    assert found == {
        "demo__echo": (site.pk, True),
        "notes__echo": (mine.pk, True),
        "gone__echo": (None, False),
        "run_code": (None, True),
    }


BEFORE_APPROVALS_APP = [("agent", "0022_conversation_pinned_and_archived"), ("approvals", None)]
APPROVALS_APP = [("agent", "0023_approvals_move_to_their_app"), ("approvals", "0001_initial")]


def test_a_site_from_before_the_approvals_app_migrates_across_with_its_rows_and_grants():
    """A database migrated to just before approvals had an app of its own, with a waiting call,
    a decided one, the site's policy, a person's choices and a grant in its agent_ tables and an
    operator group allowed agent.decide_for_others, migrates across: every row is there, read
    through the approvals models, and the group may approvals.decide_for_others."""
    from agent.models import AgentRun, Conversation
    from approvals.models import ApprovalPreference, ApprovalRequest, SiteToolPolicy, ToolGrant

    alice = User.objects.create_user("alice")
    conversation = Conversation.objects.create(owner=alice, title="across")
    run = AgentRun.objects.create(user=alice, conversation=conversation, task="t", model="mock")
    for seq, decision in ((3, ""), (4, "approve")):
        ApprovalRequest.objects.create(
            run=run,
            seq=seq,
            step=1,
            call_id=f"c{seq}",
            tool="run_code",
            arguments="{}",
            digest="d",
            decision=decision,
            decided_via="web" if decision else "",
        )
    SiteToolPolicy.objects.create(tool="write_file", mode="ask")
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    ToolGrant.objects.create(conversation=conversation, tool="list_files")
    rows = {
        model: sorted(model.objects.values_list("pk", flat=True))
        for model in (ApprovalRequest, SiteToolPolicy, ApprovalPreference, ToolGrant)
    }
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    # The rows' deferred foreign-key checks run now: a table with pending ones cannot be altered.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor.migrate(BEFORE_APPROVALS_APP)
    ContentType.objects.clear_cache()
    old = ContentType.objects.get(app_label="agent", model="approvalrequest")
    deciders = Group.objects.create(name="deciders")
    deciders.permissions.add(Permission.objects.get(content_type=old, codename="decide_for_others"))

    MigrationExecutor(connection).migrate(APPROVALS_APP)
    MigrationExecutor(connection).migrate(latest)  # and on, to what the models read
    ContentType.objects.clear_cache()

    assert {model: sorted(model.objects.values_list("pk", flat=True)) for model in rows} == rows
    assert ApprovalRequest.objects.get(seq=4).decided_via == "web"
    assert ApprovalRequest.objects.get(seq=3).waiting
    assert ContentType.objects.get(app_label="approvals", model="approvalrequest").pk == old.pk
    assert not ContentType.objects.filter(
        app_label="agent", model__in=("approvalrequest", "sitetoolpolicy", "toolgrant")
    ).exists()
    operator = User.objects.create_user("olga", is_staff=True)
    operator.groups.add(deciders)
    assert operator.has_perm("approvals.decide_for_others")
