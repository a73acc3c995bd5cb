"""Whole runs on Groq models: the same loop, the real groq client, a fake Groq server that answers
as Groq does today. Each case ends in the recorded status and the message a person would read."""

import logging

import pytest

from agent.llm import groq as groq_module
from agent.models import AgentRun
from agent.runs import default_limits, start_run
from core.ending import CUT_ANSWER
from core.events import RunStatus
from engine.execution import execute_run
from memory.models import Memory
from memory.store import embed
from tests.conftest import wait_for
from tests.groq_server import (  # noqa: F401 (the fixture)
    RETRY_NOTE,
    groq_server_fixture,
    tool_call,
)
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

GPT_OSS = "openai/gpt-oss-120b"
QWEN = "qwen/qwen3.6-27b"

# Models Groq has retired: a default among them means every keyed run fails. When Groq retires
# the next one, add it here, and this test says which default to change.
DECOMMISSIONED = {
    "llama-3.3-70b-versatile",
    "llama-3.1-70b-versatile",
    "llama3-70b-8192",
    "llama3-8b-8192",
    "llama3-groq-70b-8192-tool-use-preview",
    "llama3-groq-8b-8192-tool-use-preview",
    "mixtral-8x7b-32768",
    "gemma-7b-it",
    "gemma2-9b-it",
    "deepseek-r1-distill-llama-70b",
    "qwen-qwq-32b",
    "moonshotai/kimi-k2-instruct",
}


def test_the_default_model_and_the_suggested_ones_are_not_decommissioned(monkeypatch, tmp_path):
    default = load_settings(monkeypatch, tmp_path)["LOOP_GROQ_MODEL"]
    assert default not in DECOMMISSIONED
    assert default == groq_module.TOOL_CALLING_MODELS[0]
    assert not DECOMMISSIONED & set(groq_module.TOOL_CALLING_MODELS)


@pytest.fixture
def on_groq(settings, groq_server, workspaces):
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = GPT_OSS
    settings.LOOP_GROQ_REASONING_EFFORT = "low"
    settings.LOOP_GROQ_MAX_RETRIES = 1
    return groq_server


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait between attempts, as asked for (the wait itself still happens, on the run's
    interrupt when it has one)."""
    asked: list[float] = []
    sit_out = groq_module.GroqLLM._sit_out

    def recorded(llm: groq_module.GroqLLM, seconds: float) -> None:
        asked.append(seconds)
        sit_out(llm, seconds)

    monkeypatch.setattr(groq_module.GroqLLM, "_sit_out", recorded)
    return asked


@pytest.fixture
def recall_ready() -> None:
    """The embedder loaded before the run starts: a test of a short deadline is about the model's
    turn, which the first recall's loading of the embedder would otherwise eat into."""
    embed("warm up")


def model_replies(run: AgentRun) -> list[dict]:
    return [event.data for event in run.events.filter(kind="model_replied").order_by("seq")]


def test_a_run_on_groq_calls_tools_and_feeds_their_results_back(on_groq, alice, workspaces):
    on_groq.reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "hi"})])
    on_groq.reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})])
    on_groq.reply("a.txt says hi.", usage=(50, 5))
    run = execute_run(start_run(alice, "Write hi to a.txt and read it back"))
    assert (run.provider, run.model, run.status) == ("groq", GPT_OSS, RunStatus.SUCCEEDED)
    assert run.answer == "a.txt says hi."
    assert list(run.tool_executions.values_list("tool", "status")) == [
        ("write_file", "ok"),
        ("read_file", "ok"),
    ]
    last = on_groq.requests[-1]
    assert last.body["model"] == GPT_OSS
    assert last.messages[-1]["role"] == "tool"
    assert last.messages[-1]["content"] == "hi"
    assert (workspaces / str(alice.pk) / "a.txt").read_text() == "hi"


# --- reasoning models ----------------------------------------------------------------------------


def test_gpt_oss_gets_its_reasoning_effort_and_its_reasoning_is_recorded_never_fed_back(
    on_groq, alice
):
    thinking = "The user wants a listing. list_files takes no arguments."
    on_groq.reply(tool_calls=[tool_call("list_files", {})], reasoning=thinking, usage=(40, 30))
    on_groq.reply("Your workspace is empty.", reasoning="Nothing came back.", usage=(60, 20))

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    first, second = on_groq.requests
    assert first.body["reasoning_effort"] == "low"
    assert "reasoning_format" not in first.body  # a 400 on gpt-oss
    assert [reply["reasoning"] for reply in model_replies(run)] == [thinking, "Nothing came back."]
    assert thinking not in str(second.messages)  # the model's thinking is never sent back
    assistant = second.messages[2]
    assert set(assistant) == {"role", "content", "tool_calls"}
    assert (run.prompt_tokens, run.completion_tokens) == (100, 50)  # reasoning tokens included


def test_qwen_is_asked_for_parsed_reasoning_so_it_stays_out_of_the_answer(on_groq, settings, alice):
    settings.LOOP_GROQ_MODEL = QWEN
    on_groq.reply("17 * 23 is 391.", reasoning="17 * 23 = 340 + 51 = 391")

    run = execute_run(start_run(alice, "What is 17 * 23?"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "17 * 23 is 391.")
    [request] = on_groq.requests
    assert request.body["reasoning_format"] == "parsed"
    assert "reasoning_effort" not in request.body  # qwen3.6 takes none/default, not low
    assert model_replies(run)[0]["reasoning"] == "17 * 23 = 340 + 51 = 391"


def test_the_summary_turn_of_qwen_keeps_its_reasoning_apart_too(on_groq, settings, alice):
    settings.LOOP_GROQ_MODEL = QWEN
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.reply("I listed your files; there were none.", reasoning="Summarise briefly.")

    run = execute_run(start_run(alice, "List my files", limits=default_limits(max_iterations=1)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    assert run.answer == "I listed your files; there were none."
    summary_request = on_groq.requests[-1].body
    assert "tools" not in summary_request
    assert summary_request["reasoning_format"] == "parsed"


# --- a model that does not exist ---------------------------------------------------------------


def test_a_decommissioned_model_fails_the_run_at_once_naming_the_fix(on_groq, settings, alice):
    settings.LOOP_GROQ_MODEL = "llama-3.3-70b-versatile"

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert len(on_groq.requests) == 1  # no retries
    assert "Groq has no model 'llama-3.3-70b-versatile' that this key can use" in run.error
    assert "does not exist or you do not have access to it" in run.error
    assert "Set LOOP_GROQ_MODEL" in run.error
    assert "'openai/gpt-oss-120b'" in run.error
    assert "manage.py groqcheck" in run.error


# --- replies Groq rejects: fed back once, then a clear failure ----------------------------------


def test_a_call_to_a_tool_not_offered_is_fed_back_and_the_model_corrects_itself(on_groq, alice):
    on_groq.tool_not_in_request("repo_browser.open_file")
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.reply("Done: no files.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Done: no files.")
    note = on_groq.requests[1].messages[-1]
    assert note["role"] == "user"
    assert "attempted to call tool 'repo_browser.open_file'" in note["content"]
    assert "Call one of the tools you have (run_code, read_file" in note["content"]
    assert "repo_browser" in model_replies(run)[0]["recovered_error"]


def test_a_tool_not_offered_twice_in_a_row_fails_the_run_with_its_progress(on_groq, alice):
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.tool_not_in_request("container.exec", times=2)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert run.error.startswith("Model failed: Groq answered 400: Tool call validation failed")
    assert run.error.endswith("again, after the first was fed back")
    assert "What worked: list_files." in run.answer


def test_a_tool_call_in_the_summary_turn_is_corrected_once(on_groq, alice):
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.tool_choice_none('{"name": "list_files", "arguments": {}}')
    on_groq.reply("I listed your files once; the workspace is empty.")

    run = execute_run(start_run(alice, "List my files", limits=default_limits(max_iterations=1)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    assert run.answer == "I listed your files once; the workspace is empty."
    note = on_groq.requests[-1].messages[-1]["content"]
    assert "Tool choice is none, but model called a tool" in note
    assert "Tools are switched off for this turn" in note


def test_a_summary_turn_that_keeps_calling_tools_falls_back_to_the_recorded_progress(
    on_groq, alice
):
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.tool_choice_none('{"name": "list_files"}', times=2)

    run = execute_run(start_run(alice, "List my files", limits=default_limits(max_iterations=1)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    assert run.answer.startswith("Stopped before a final answer.")
    assert "What worked: list_files." in run.answer


# --- rate limits ---------------------------------------------------------------------------------


def test_a_rate_limit_is_waited_out_when_the_wait_fits(on_groq, alice, waits):
    on_groq.rate_limited(retry_after=1)
    on_groq.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert waits == [1.0]
    first, second = on_groq.requests
    assert second.at - first.at >= 0.9


def test_without_retry_after_the_spent_windows_reset_time_is_waited(on_groq, alice, waits):
    on_groq.rate_limited(retry_after=None, reset_tokens="300ms")
    on_groq.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.SUCCEEDED
    assert waits == [pytest.approx(0.3)]


def test_a_rate_limit_longer_than_the_run_has_left_fails_it_at_once_saying_when(
    on_groq, alice, waits
):
    on_groq.rate_limited(retry_after=30)

    run = start_run(alice, "List my files", limits=default_limits(max_seconds=10))
    run = execute_run(run)

    assert run.status == RunStatus.FAILED
    assert waits == []  # the run's deadline comes first
    assert len(on_groq.requests) == 1
    assert run.error.startswith("Model failed: Groq's rate limit was reached: Rate limit reached")
    assert "Try again in 30 seconds (after " in run.error


def test_a_rate_limit_of_minutes_is_not_sat_out_inside_a_run(on_groq, alice, waits):
    on_groq.rate_limited(retry_after=300)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert waits == []
    assert "Try again in 5 minutes (after " in run.error


def test_a_rate_limit_that_outlasts_the_retries_says_when_to_try_again(on_groq, alice, waits):
    on_groq.rate_limited(retry_after=0.2, times=2)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert waits == [0.2]  # LOOP_GROQ_MAX_RETRIES = 1
    assert "rate limit was reached" in run.error
    assert "Try again in 1 second (after " in run.error


# --- the provider failing outright --------------------------------------------------------------


def test_a_provider_that_keeps_failing_ends_the_run_failed_with_its_progress(on_groq, alice):
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.fail(500, "internal error", headers={"retry-after-ms": "10"}, times=2)
    run = execute_run(start_run(alice, "List my files"))
    assert run.status == RunStatus.FAILED
    assert run.error == "Model failed: Groq answered 500: internal error"
    assert "What worked: list_files." in run.answer
    assert len(on_groq.requests) == 3  # one turn, then the failing one and its one retry


@pytest.mark.serial
def test_a_slow_provider_is_cut_off_at_the_runs_deadline(on_groq, alice, recall_ready):
    on_groq.reply("too late", delay=5)
    run = start_run(alice, "List my files", limits=default_limits(max_seconds=1))
    run = execute_run(run)
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "deadline")
    assert len(on_groq.requests) == 1  # no retry past the deadline
    assert run.error.startswith("The model provider did not answer in time: Groq did not finish")


# --- streaming -----------------------------------------------------------------------------------


def test_a_run_on_groq_streams_its_answer_to_the_pages_before_storing_it(
    on_groq, alice, monkeypatch
):
    published: list[tuple[int, int, str]] = []
    monkeypatch.setattr(
        "agent.bus.publish_delta", lambda run, step, text: published.append((run, step, text))
    )
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.reply("Your workspace is empty, so there is nothing to list.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (
        RunStatus.SUCCEEDED,
        "Your workspace is empty, so there is nothing to list.",
    )
    assert all(request.body["stream"] is True for request in on_groq.requests)
    assert len(published) > 1
    assert {(run_id, step) for run_id, step, _ in published} == {(run.pk, 2)}
    assert "".join(text for _, _, text in published) == run.answer
    assert list(run.tool_executions.values_list("tool", "status")) == [("list_files", "ok")]


# --- a reply cut short, dropped or dripping in -------------------------------------------------

ANSWER = "The sum of 1..100 is 5050, computed as 100 * 101 / 2."


def remembered(run: AgentRun) -> list[str]:
    return list(Memory.objects.filter(source_run_id=run.pk).values_list("text", flat=True))


# A run that writes a file leaves an outcome worth remembering (one that only answers, none).
SAVE = tool_call("write_file", {"path": "sum.txt", "content": "5050\n"})
SAVE_TASK = "Save the sum of 1..100 to sum.txt"


def test_a_stream_cut_before_its_last_chunk_is_asked_for_again_and_the_run_succeeds(on_groq, alice):
    on_groq.reply(tool_calls=[SAVE])
    on_groq.reply(ANSWER, cut_after=3)
    on_groq.reply(ANSWER)

    run = execute_run(start_run(alice, SAVE_TASK))

    assert (run.status, run.answer, run.error) == (RunStatus.SUCCEEDED, ANSWER, "")
    assert len(on_groq.requests) == 3
    [_, reply] = model_replies(run)
    assert reply["retried"] == ["Groq cut its reply short: the stream ended before its last chunk."]
    [memory] = remembered(run)
    assert f"Answer: {ANSWER}" in memory


def test_a_stream_cut_on_every_attempt_fails_the_run_with_its_progress(on_groq, alice):
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.reply(ANSWER, cut_after=3, times=2)  # LOOP_GROQ_MAX_RETRIES = 1

    run = execute_run(start_run(alice, "List my files, then sum 1..100"))

    assert run.status == RunStatus.FAILED
    assert run.error == (
        "Model failed: Groq cut its reply short: the stream ended before its last chunk, on each "
        "of 2 attempts."
    )
    assert "What worked: list_files." in run.answer
    assert ANSWER[:16] not in run.answer  # the cut text is no answer
    assert remembered(run) == []


@pytest.mark.parametrize("finish_reason", ["length", "stop"])
def test_an_answer_stopped_at_the_output_limit_is_kept_marked_cut_and_not_remembered(
    on_groq, alice, finish_reason
):
    on_groq.reply(tool_calls=[SAVE])
    on_groq.reply(ANSWER, finish_reason=finish_reason)

    run = execute_run(start_run(alice, SAVE_TASK))

    cut = finish_reason == "length"
    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, ANSWER)
    assert run.error == (CUT_ANSWER if cut else "")
    finished = run.events.get(kind="run_finished").data
    assert (finished["cut"], finished["error"]) == (cut, run.error)
    assert [reply["cut"] for reply in model_replies(run)] == [False, cut]
    assert len(remembered(run)) == (0 if cut else 1)


@pytest.mark.parametrize("chunks", [0, 3], ids=["after-the-headers", "mid-stream"])
def test_a_connection_dropped_while_the_reply_streams_is_retried_and_the_run_succeeds(
    on_groq, alice, monkeypatch, caplog, chunks
):
    published: list[tuple[int, str]] = []
    monkeypatch.setattr(
        "agent.bus.publish_delta", lambda run, step, text: published.append((step, text))
    )
    on_groq.reply(ANSWER, drop_after=chunks)
    on_groq.reply(ANSWER)

    with caplog.at_level(logging.WARNING, logger="agent.llm.groq"):
        run = execute_run(start_run(alice, "What is the sum of 1..100?"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, ANSWER)
    assert len(on_groq.requests) == 2
    [reply] = model_replies(run)
    [retry] = reply["retried"]
    assert retry.startswith("The connection to Groq broke while its reply came in: ")
    assert [record.getMessage() for record in caplog.records] == [
        f"Groq: attempt 1 failed, retrying: {retry}"
    ]
    # Both attempts stream into step 1's card, which the stored answer then replaces.
    assert {step for step, _ in published} == {1}
    shown_before = ANSWER[:16] + RETRY_NOTE if chunks else ""
    assert "".join(text for _, text in published) == shown_before + ANSWER


@pytest.mark.serial
def test_a_reply_dripping_past_the_deadline_halts_the_run_saying_the_provider_was_too_slow(
    on_groq, alice, monkeypatch, recall_ready
):
    published: list[str] = []
    monkeypatch.setattr("agent.bus.publish_delta", lambda run, step, text: published.append(text))
    on_groq.reply("word " * 400, drip=0.2)  # 251 chunks: 50 s, a chunk at a time

    run = execute_run(start_run(alice, "Write a long essay", limits=default_limits(max_seconds=3)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "deadline")
    assert run.error.startswith(
        "The model provider did not answer in time: Groq did not finish its reply within the "
    )
    halted = run.events.get(kind="run_halted").data
    assert halted["detail"] == (
        "the model provider did not answer before the run's deadline of 3 seconds."
    )
    assert "refine" not in (run.error + halted["detail"]).lower()
    assert run.answer.startswith("Stopped before a final answer.")
    assert published  # the reply was coming in when the deadline cut it off
    [sent] = wait_for(lambda: on_groq.streams, "the fake to stop dripping")
    assert sent.client_left
    assert sent.chunks < sent.of
    assert len(on_groq.requests) == 1
