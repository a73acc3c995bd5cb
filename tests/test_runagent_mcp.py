"""`manage.py runagent` with a site MCP server declared in the environment (issue 30): the
command lists a server never listed before it starts, so the run can use its tools at once; an
MCP call that asks waits, in a process without a terminal, for a decision (exit 6), and
`--resume --yes` approves it and works the run to its end, the call sent once."""

import json

import pytest

from agent.models import AgentRun
from mcp_servers.models import McpServer
from tests.mcp_servers.harness import modern_server_fixture  # noqa: F401

TASK = 'Use demo__add with {"a": 2, "b": 40}'
WAITING = 6  # runagent's exit status for a run that waits for a decision


def declared(server_url: str, **entry: object) -> dict[str, str]:
    return {"LOOP_MCP_SERVERS": json.dumps([{"name": "Demo", "url": server_url, **entry}])}


@pytest.mark.django_db(transaction=True)
def test_runagent_lists_a_new_server_and_calls_its_auto_tool(manage, worker_env, modern_server):
    modern_server.reset()
    done = manage("runagent", TASK, env=worker_env | declared(modern_server.url, auto=["add"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'demo__add {"a": 2, "b": 40}' in done.stdout
    assert "<<<mcp result>>>" in done.stdout
    assert "42" in done.stdout
    assert McpServer.objects.get(name="Demo").discovered_at is not None
    assert modern_server.calls() == [{"tool": "add", "arguments": {"a": 2, "b": 40}}]


@pytest.mark.django_db(transaction=True)
def test_an_asking_mcp_call_waits_and_resume_yes_sends_it_once(manage, worker_env, modern_server):
    modern_server.reset()
    env = worker_env | declared(modern_server.url)
    waiting = manage("runagent", TASK, env=env)
    assert waiting.returncode == WAITING, waiting.stdout + waiting.stderr
    assert modern_server.calls() == []  # nothing is sent before a decision
    run = AgentRun.objects.get()
    done = manage("runagent", "--resume", str(run.pk), "--yes", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert modern_server.calls() == [{"tool": "add", "arguments": {"a": 2, "b": 40}}]
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert "42" in run.answer
