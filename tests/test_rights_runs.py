"""Group rights in the worker, through the engine in this process (jobs worked by work_job, the
real sandbox, the embedded PostgreSQL): a call of a tool the run's rights do not allow is refused
as a tool result saying why and never runs; a run is bound by its person's rights as they stand
at each attempt, so one that resumes after an approval or is continued cannot call a tool taken
away meanwhile, nor go on with a model taken away; a group's "ask before" makes a call wait (the
least strict of a person's groups wins, the site's ask stays); a run records what it was allowed.

A real worker process on a resumed run is tests/test_rights_worker.py's."""

import json
from pathlib import Path

import pytest

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from agent.runs import (
    ModelNotOffered,
    continue_run,
    default_limits,
    new_conversation,
    start_run,
    submit_run,
)
from approvals.decisions import DecisionRefused, decide
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from engine.execution import execute_run, work_job
from rights.models import GroupRights
from tests.rights_helpers import group_with, site_server

pytestmark = pytest.mark.django_db(transaction=True)

# A snippet whose trace outlives it: a file in the person's workspace.
LEAVES_A_TRACE = {"code": "open('ran.txt', 'w').write('it ran')\nprint('ran')"}
PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer


def results(run: AgentRun) -> list[tuple[str, str, str]]:
    """(tool, status, text) of each call that finished."""
    finished = run.events.filter(kind="tool_call_finished").order_by("seq")
    return [(e.data["tool"], e.data["status"], e.data["text"]) for e in finished]


def ran_code(workspaces: Path, user) -> bool:
    return any(workspaces.rglob("ran.txt"))


def worked(run: AgentRun) -> AgentRun:
    run.refresh_from_db()
    work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)
    run.refresh_from_db()
    return run


def scripted(user, *replies) -> AgentRun:
    run = start_run(user, "a task", model="mock", conversation=new_conversation(user))
    return execute_run(run, llm=ScriptedLLM(list(replies)))


def approve(run: AgentRun, **choices) -> None:
    request = run.approvals.get(decision="")
    decide(
        run.user,
        run.pk,
        [CallDecision(request.call_id, Decision.APPROVE, request.digest, **choices)],
    )


@pytest.fixture
def coders(alice):
    """Alice's one group gives read_file and run_code, no MCP server."""
    return group_with(
        "coders",
        alice,
        all_tools=False,
        tool_names=["read_file", "run_code"],
        all_mcp_servers=False,
    )


def lose_run_code(group) -> None:
    rights = GroupRights.objects.get(group=group)
    rights.tool_names = ["read_file"]
    rights.save()


def test_a_forbidden_tool_is_refused_as_a_tool_result_and_never_runs(alice, workspaces):
    site_server("cal", "add_event", alice)
    group_with("readers", alice, all_tools=False, tool_names=["read_file"], all_mcp_servers=False)
    run = scripted(
        alice,
        call("run_code", LEAVES_A_TRACE),
        call("cal__add_event", {}),
        answer("done"),
    )
    assert run.status == RunStatus.SUCCEEDED
    [code, event] = results(run)
    assert code[:2] == ("run_code", "error")
    assert code[2].startswith("Your groups do not allow the tool run_code, so it was not called.")
    assert event[:2] == ("cal__add_event", "error")
    assert event[2].startswith("Your groups do not allow the tool cal__add_event")
    assert not ran_code(workspaces, alice)


def test_an_allowed_tool_runs(alice, coders, workspaces):
    run = scripted(alice, call("run_code", LEAVES_A_TRACE), answer("done"))
    [(tool, status, _)] = results(run)
    assert (tool, status) == ("run_code", "ok")
    assert ran_code(workspaces, alice)


def test_a_run_parked_on_an_approval_cannot_call_a_tool_lost_meanwhile(
    alice, coders, workspaces, settings
):
    settings.LOOP_APPROVAL = "run_code=ask"
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    run = worked(run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    lose_run_code(coders)

    approve(run)  # approved, but the right is gone: the call must not run
    run = worked(run)
    assert run.status in (RunStatus.SUCCEEDED, RunStatus.HALTED)
    [(tool, status, text), *_] = results(run)
    assert (tool, status) == ("run_code", "error")
    assert text.startswith("Your groups do not allow the tool run_code")
    assert "391" not in run.answer


def test_a_continued_run_is_bound_by_the_rights_as_they_stand(alice, coders, workspaces):
    halted = start_run(alice, "a task", model="mock", limits=default_limits(max_iterations=1))
    halted = execute_run(halted, llm=ScriptedLLM([call("list_files", {}), answer("so far")]))
    assert halted.status == RunStatus.HALTED
    lose_run_code(coders)
    continued = continue_run(alice, halted.pk)
    model = ScriptedLLM([call("run_code", LEAVES_A_TRACE), answer("done"), answer("done")])
    continued = execute_run(continued, llm=model)
    assert "run_code" not in [spec["function"]["name"] for spec in model.turns[0][1] or []]
    [(_, status, text)] = [result for result in results(continued) if result[0] == "run_code"]
    assert status == "error"
    assert text.startswith("Your groups do not allow the tool run_code")
    assert not ran_code(workspaces, alice)


def test_a_run_on_a_model_taken_away_does_not_go_on(alice, coders, workspaces):
    run = start_run(alice, "a task", model="mock", limits=default_limits(max_iterations=1))
    run = execute_run(run, llm=ScriptedLLM([call("list_files", {}), answer("so far")]))
    assert run.status == RunStatus.HALTED
    coders.rights.all_models = False
    coders.rights.model_names = ["groq:llama-3.3-70b-versatile"]
    coders.rights.save()
    with pytest.raises(ModelNotOffered, match="You may not use the model 'mock'"):
        continue_run(alice, run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_a_groups_ask_makes_a_call_wait_though_the_person_does_not_ask(alice, workspaces):
    group_with("careful", alice, ask_before=["run_code"])
    run = worked(submit_run(alice, PRODUCT, new_conversation(alice), model="mock"))
    assert run.status == RunStatus.AWAITING_APPROVAL
    request = run.approvals.get()
    assert request.why == "Your group or assistant asks before every run_code call."
    with pytest.raises(DecisionRefused, match="cannot be always allowed"):
        approve(run, always=True)
    approve(run)
    run = worked(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run.answer == "17 * 23 = 391"


def test_in_two_groups_the_less_strict_wins(alice, workspaces):
    group_with("careful", alice, ask_before=["run_code"])
    group_with("relaxed", alice)
    run = worked(submit_run(alice, PRODUCT, new_conversation(alice), model="mock"))
    assert run.status == RunStatus.SUCCEEDED
    assert not run.approvals.exists()


def test_the_sites_ask_stays_whatever_the_groups_say(alice, workspaces, settings):
    settings.LOOP_APPROVAL = "run_code=ask"
    group_with("relaxed", alice)
    run = worked(submit_run(alice, PRODUCT, new_conversation(alice), model="mock"))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.approvals.get().why == "The site asks before every run_code call."


def test_a_run_records_what_it_was_allowed(alice, coders, settings):
    server = site_server("cal", "add_event", alice)
    coders.rights.ask_before = ["run_code"]
    coders.rights.all_mcp_servers = False
    coders.rights.save()
    coders.rights.mcp_servers.add(server)
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    expected = {
        "models": None,
        "tools": ["read_file", "run_code"],
        "mcp_servers": [server.pk],
        "ask": ["run_code"],
        "memory": True,
    }
    assert run.allowed == {"rights": expected, "assistant": None}
    lose_run_code(coders)  # the record is what it was allowed when it started
    run.refresh_from_db()
    assert run.allowed["rights"] == expected
    assert json.dumps(run.allowed)  # plain JSON


def test_a_run_waiting_when_its_model_is_taken_away_does_not_go_on(alice, coders, workspaces):
    coders.rights.ask_before = ["run_code"]
    coders.rights.save()
    run = worked(submit_run(alice, PRODUCT, new_conversation(alice), model="mock"))
    assert run.status == RunStatus.AWAITING_APPROVAL
    coders.rights.all_models = False
    coders.rights.model_names = ["groq:llama-3.3-70b-versatile"]
    coders.rights.save()
    approve(run)
    run = worked(run)
    assert run.status == RunStatus.FAILED
    assert "your groups no longer allow the model 'mock'" in run.error
    assert [result for result in results(run) if result[1] == "ok"] == []
