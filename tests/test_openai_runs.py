"""Whole runs on an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter):
the same loop and worker, the real openai client, a fake server on 127.0.0.1 that behaves as
those servers do. Each case ends in the recorded status and the message a person would read."""

import json
import socket
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.llm.mistakes import SERVER_FLAGS_HINT, TEXT_TOOL_CALL_NOTE
from agent.llm.openai_compat import OpenAICompatibleLLM
from agent.models import AgentRun
from agent.runs import default_limits, start_run
from core.events import RunStatus
from engine.execution import execute_run
from memory.store import embed
from tests.conftest import wait_for
from tests.openai_server import MODEL, FakeOpenAIServer, openai_server_fixture, tool_call  # noqa: F401
from tests.test_runagent import runagent

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
SUM_CODE = "print(sum(range(1, 101)))"
ANSWER = "The sum of 1..100 is 5050. I saved it to sum.txt."
THOUGHT = "The user wants a listing. <list_files> takes no arguments."


@pytest.fixture
def on_server(settings, openai_server, workspaces) -> FakeOpenAIServer:
    """Loop configured for the fake server alone, keyless, as for a local Ollama."""
    settings.GROQ_API_KEY = ""
    settings.LOOP_MODEL = ""
    settings.LOOP_MODELS = []
    settings.LOOP_OPENAI_BASE_URL = openai_server.base_url
    settings.LOOP_OPENAI_API_KEY = ""
    settings.LOOP_OPENAI_MODEL = MODEL
    settings.LOOP_OPENAI_REASONING_EFFORT = ""
    settings.LOOP_OPENAI_MAX_RETRIES = 1
    return openai_server


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait between attempts, as asked for (the wait itself still happens)."""
    asked: list[float] = []
    sit_out = OpenAICompatibleLLM._sit_out

    def recorded(llm: OpenAICompatibleLLM, seconds: float) -> None:
        asked.append(seconds)
        sit_out(llm, seconds)

    monkeypatch.setattr(OpenAICompatibleLLM, "_sit_out", recorded)
    return asked


@pytest.fixture
def published(monkeypatch) -> list[tuple[int, int, str]]:
    """The reply pieces streamed to the run's pages: (run, step, text)."""
    pieces: list[tuple[int, int, str]] = []
    monkeypatch.setattr(
        "agent.bus.publish_delta", lambda run, step, text: pieces.append((run, step, text))
    )
    return pieces


@pytest.fixture
def recall_ready() -> None:
    """The embedder loaded before the run starts, so a short deadline is the model's alone."""
    embed("warm up")


def model_replies(run: AgentRun) -> list[dict]:
    return [event.data for event in run.events.filter(kind="model_replied").order_by("seq")]


def tools_run(run: AgentRun) -> list[tuple[str, str]]:
    return list(run.tool_executions.order_by("pk").values_list("tool", "status"))


def assistant_calls(message: dict) -> list[tuple[str, str, dict]]:
    """(id, name, arguments) of each call in an assistant message sent back to the server."""
    return [
        (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message["tool_calls"]
    ]


def answered_ids(messages: list[dict]) -> list[str]:
    return [message["tool_call_id"] for message in messages if message["role"] == "tool"]


# --- the demo task -------------------------------------------------------------------------------


def test_the_demo_task_runs_code_writes_the_file_and_answers(on_server, alice, workspaces):
    on_server.reply(tool_calls=[tool_call("run_code", {"code": SUM_CODE})], usage=(300, 20))
    on_server.reply(
        tool_calls=[tool_call("write_file", {"path": "sum.txt", "content": "5050\n"})],
        usage=(340, 25),
    )
    on_server.reply(ANSWER, usage=(380, 15))

    run = execute_run(start_run(alice, DEMO))

    assert (run.provider, run.model, run.status) == ("openai", MODEL, RunStatus.SUCCEEDED)
    assert (run.answer, run.error) == (ANSWER, "")
    assert tools_run(run) == [("run_code", "ok"), ("write_file", "ok")]
    assert (workspaces / str(alice.pk) / "sum.txt").read_text() == "5050\n"
    first, second, third = on_server.requests
    assert {request.path for request in on_server.requests} == {"/v1/chat/completions"}
    assert all(request.body["model"] == MODEL for request in on_server.requests)
    assert [spec["function"]["name"] for spec in first.body["tools"]][:3] == [
        "run_code",
        "read_file",
        "write_file",
    ]
    assert first.headers["authorization"] == "Bearer no-key"  # keyless: Loop's placeholder
    assert "reasoning_effort" not in first.body  # sent only when configured
    ran = second.messages[-1]
    assert ran["role"] == "tool"
    assert "5050" in ran["content"]
    assert third.messages[-1]["role"] == "tool"
    assert (run.prompt_tokens, run.completion_tokens) == (1020, 60)
    started = run.events.get(kind="run_started").data
    assert (started["provider"], started["model"]) == ("openai", MODEL)


def test_a_configured_key_and_reasoning_effort_are_sent(on_server, settings, alice):
    settings.LOOP_OPENAI_API_KEY = "sk-or-test"
    settings.LOOP_OPENAI_REASONING_EFFORT = "low"
    on_server.behave(requires_key="sk-or-test")
    on_server.reply("Hello.")

    run = execute_run(start_run(alice, "Say hello"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Hello.")
    [request] = on_server.requests
    assert request.headers["authorization"] == "Bearer sk-or-test"
    assert request.body["reasoning_effort"] == "low"


def test_a_server_that_wants_a_key_it_was_not_given_fails_the_run_saying_so(on_server, alice):
    on_server.behave(requires_key="sk-or-test")

    run = execute_run(start_run(alice, "Say hello"))

    assert run.status == RunStatus.FAILED
    assert len(on_server.requests) == 1  # a 401 is not retried
    assert run.error.startswith(f"Model failed: The model server at {on_server.base_url} answered")
    assert "401" in run.error
    assert "Incorrect API key provided" in run.error


# --- streaming -----------------------------------------------------------------------------------


def test_a_run_streams_its_answer_to_the_pages_before_storing_it(on_server, alice, published):
    on_server.reply(tool_calls=[tool_call("list_files", {})])
    on_server.reply("Your workspace is empty, so there is nothing to list.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (
        RunStatus.SUCCEEDED,
        "Your workspace is empty, so there is nothing to list.",
    )
    assert all(request.body["stream"] is True for request in on_server.requests)
    assert len(published) > 1  # in pieces, as it came
    assert {(run_id, step) for run_id, step, _ in published} == {(run.pk, 2)}
    assert "".join(text for _, _, text in published) == run.answer


@pytest.mark.parametrize(
    ("fault", "chunks"),
    [("drop_after", 0), ("drop_after", 3), ("cut_after", 3)],
    ids=["dropped-after-the-headers", "dropped-mid-stream", "cut-mid-stream"],
)
def test_a_reply_broken_off_is_asked_again_and_the_run_succeeds(
    on_server, alice, published, fault, chunks
):
    on_server.reply(ANSWER, **{fault: chunks})
    on_server.reply(ANSWER)

    run = execute_run(start_run(alice, "What is the sum of 1..100?"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, ANSWER)
    assert len(on_server.requests) == 2
    [retry] = model_replies(run)[0]["retried"]
    server = f"the model server at {on_server.base_url}"
    assert retry.startswith(
        f"The connection to {server} broke while its reply came in"
        if fault == "drop_after"
        else f"The model server at {on_server.base_url} cut its reply short"
    )
    shown = "".join(text for _, _, text in published)
    note = "\n\n[The model server's reply broke off; Loop asked for it again.]\n\n"
    assert shown == (ANSWER[: 5 * (chunks - 1)] + note if chunks else "") + ANSWER


# --- usage ---------------------------------------------------------------------------------------


def test_usage_is_asked_for_in_streamed_replies_and_recorded(on_server, alice):
    on_server.reply(tool_calls=[tool_call("list_files", {})], usage=(120, 8))
    on_server.reply("Nothing there.", usage=(150, 4))

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.SUCCEEDED
    for request in on_server.requests:
        assert request.body["stream_options"] == {"include_usage": True}
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in model_replies(run)] == [
        (120, 8),
        (150, 4),
    ]
    assert (run.prompt_tokens, run.completion_tokens) == (270, 12)


def test_a_server_refusing_stream_options_is_asked_without_them_for_the_rest_of_the_run(
    on_server, alice
):
    on_server.behave(rejects_stream_options=True, usage_only_when_asked=False)
    on_server.reply(tool_calls=[tool_call("list_files", {})], usage=(120, 8))
    on_server.reply("Nothing there.", usage=(150, 4))

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Nothing there.")
    refused, first, second = on_server.requests
    assert "stream_options" in refused.body
    assert "stream_options" not in first.body
    assert "stream_options" not in second.body
    assert (run.prompt_tokens, run.completion_tokens) == (270, 12)
    assert all(reply["retried"] == [] for reply in model_replies(run))  # no retry: a re-ask


# --- tool calls as servers send them -------------------------------------------------------------

TWO_CALLS = [
    tool_call("write_file", {"path": "a.txt", "content": "first file"}),
    tool_call("write_file", {"path": "b.txt", "content": "second file"}),
]


@pytest.mark.parametrize(
    "quirks",
    [
        {},
        {"whole_tool_calls": True},
        {"call_ids": False},
        {"call_index": False},
        {"call_index": False, "whole_tool_calls": True},
        {"call_ids": False, "call_index": False, "whole_tool_calls": True},
        {"finish_with_calls": "stop"},
    ],
    ids=[
        "pieces",
        "whole",
        "no-id",
        "no-index",
        "no-index-whole",
        "no-id-no-index-whole",
        "finish-stop",
    ],
)
def test_two_calls_in_one_reply_each_run_once_with_their_own_arguments(
    on_server, alice, workspaces, quirks
):
    on_server.behave(**quirks)
    on_server.reply(tool_calls=TWO_CALLS)
    on_server.reply("Wrote a.txt and b.txt.")

    run = execute_run(start_run(alice, "Write two files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Wrote a.txt and b.txt.")
    assert tools_run(run) == [("write_file", "ok"), ("write_file", "ok")]
    home = workspaces / str(alice.pk)
    assert (home / "a.txt").read_text() == "first file"
    assert (home / "b.txt").read_text() == "second file"
    fed_back = on_server.requests[1].messages
    assistant = next(message for message in fed_back if message.get("tool_calls"))
    calls = assistant_calls(assistant)
    assert [(name, arguments) for _, name, arguments in calls] == [
        ("write_file", {"path": "a.txt", "content": "first file"}),
        ("write_file", {"path": "b.txt", "content": "second file"}),
    ]
    ids = [call_id for call_id, _, _ in calls]
    assert all(ids)  # generated when the server sent none
    assert len(set(ids)) == 2
    assert answered_ids(fed_back) == ids  # each result answers its own call


# --- reasoning -----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["reasoning_content", "reasoning", "think"])
def test_reasoning_is_recorded_kept_out_of_the_answer_and_never_fed_back(
    on_server, alice, published, where
):
    on_server.behave(reasoning=where)
    on_server.reply(tool_calls=[tool_call("list_files", {})], reasoning=THOUGHT)
    on_server.reply("Your workspace is empty.", reasoning="Nothing came back.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert [reply["reasoning"] for reply in model_replies(run)] == [THOUGHT, "Nothing came back."]
    sent_back = json.dumps(on_server.requests[1].messages)
    assert "wants a listing" not in sent_back
    assert "<think>" not in sent_back
    shown = "".join(text for _, _, text in published)
    assert shown == "Your workspace is empty."  # the thinking never streams as answer


# --- a server that cannot call tools -------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ("ollama", f"registry.ollama.ai/library/{MODEL} does not support tools"),
        ("vllm", '"auto" tool choice requires --enable-auto-tool-choice'),
        ("llamacpp", "tools param requires --jinja flag"),
    ],
)
def test_a_server_that_cannot_call_tools_fails_the_run_at_once_saying_what_to_do(
    on_server, alice, waits, server, said
):
    on_server.behave(no_tools=server)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert run.error.startswith(
        f"Model failed: {MODEL} on the model server at {on_server.base_url} cannot call tools ("
    )
    assert said in run.error
    assert "pick a model that supports it" in run.error
    assert "docs/models.md" in run.error
    assert waits == []  # no retry: asking again cannot help
    assert len(on_server.requests) == 1


# --- a tool call written as text ---------------------------------------------------------------

WRITTEN_CALL = '```json\n{"name": "list_files", "arguments": {}}\n```'


@pytest.mark.parametrize(
    "written",
    [
        WRITTEN_CALL,
        '{"name": "list_files", "parameters": {}}',
        '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
    ],
    ids=["fenced", "bare", "tagged"],
)
def test_a_tool_call_written_as_text_is_fed_back_once_and_the_model_corrects_itself(
    on_server, alice, published, written
):
    on_server.reply(written)
    on_server.reply(tool_calls=[tool_call("list_files", {})])
    on_server.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert tools_run(run) == [("list_files", "ok")]
    note = TEXT_TOOL_CALL_NOTE.format(name="list_files")
    corrected = on_server.requests[1].messages
    assert corrected[-1] == {"role": "user", "content": note}
    first, second = model_replies(run)
    assert first["recovered_error"] == note
    assert [call["name"] for call in first["tool_calls"]] == ["list_files"]
    assert second["recovered_error"] == ""
    assert note not in json.dumps(on_server.requests[2].messages)  # fed back once, not kept
    shown = "".join(text for _, step, text in published if step == 1)
    assert f"[{MODEL} wrote a tool call as text; Loop asked it again.]" in shown


def test_a_tool_call_written_as_text_twice_fails_the_run_naming_the_server_flags(on_server, alice):
    on_server.reply(tool_calls=[tool_call("list_files", {})])
    on_server.reply(WRITTEN_CALL, times=2)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert run.error == (
        f"Model failed: {MODEL} on the model server at {on_server.base_url} wrote its tool call "
        f"to list_files as text instead of calling it, twice, the second time after being told: "
        f"{SERVER_FLAGS_HINT}."
    )
    assert "What worked: list_files." in run.answer
    assert len(on_server.requests) == 3


# --- rate limits and outages ---------------------------------------------------------------------


def test_a_rate_limit_is_waited_out_for_its_retry_after(on_server, alice, waits):
    on_server.rate_limited(retry_after=1)
    on_server.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert waits == [1.0]
    [retry] = model_replies(run)[0]["retried"]
    assert retry.startswith("The model server's rate limit was reached: Rate limit reached for ")


def test_without_retry_after_the_spent_windows_reset_time_is_waited(on_server, alice, waits):
    on_server.rate_limited(retry_after=None)  # x-ratelimit-reset-tokens: 1.4s
    on_server.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.SUCCEEDED
    assert waits == [pytest.approx(1.4)]


def test_a_rate_limit_longer_than_the_run_has_left_fails_it_at_once_saying_when(
    on_server, alice, waits
):
    on_server.rate_limited(retry_after=30)

    run = execute_run(start_run(alice, "List my files", limits=default_limits(max_seconds=10)))

    assert run.status == RunStatus.FAILED
    assert waits == []
    assert len(on_server.requests) == 1
    assert run.error.startswith("Model failed: The model server's rate limit was reached: ")
    assert "Try again in 30 seconds (after " in run.error


def test_a_500_then_a_reply_is_retried_and_the_run_succeeds(on_server, alice, waits):
    on_server.reply(tool_calls=[tool_call("list_files", {})])
    on_server.fail(500, "llama runner process has terminated")
    on_server.reply("Your workspace is empty.")

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert len(on_server.requests) == 3
    assert len(waits) == 1
    assert model_replies(run)[1]["retried"] == [
        f"The model server at {on_server.base_url} answered 500: llama runner process has "
        "terminated"
    ]


def test_a_server_failing_on_every_attempt_ends_the_run_failed_with_its_progress(
    on_server, alice, waits
):
    on_server.reply(tool_calls=[tool_call("list_files", {})])
    on_server.fail(503, "overloaded", headers={"retry-after-ms": "10"}, times=2)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert (
        run.error
        == f"Model failed: The model server at {on_server.base_url} answered 503: overloaded"
    )
    assert "What worked: list_files." in run.answer
    assert waits == [0.01]  # LOOP_OPENAI_MAX_RETRIES = 1


@pytest.mark.serial
def test_a_slow_server_is_cut_off_at_the_runs_deadline(on_server, alice, recall_ready):
    on_server.reply("too late", delay=5)

    run = execute_run(start_run(alice, "List my files", limits=default_limits(max_seconds=1)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "deadline")
    assert len(on_server.requests) == 1  # no retry past the deadline
    assert run.error.startswith(
        f"The model provider did not answer in time: The model server at {on_server.base_url} "
        "did not finish its reply within the "
    )
    assert run.answer.startswith("Stopped before a final answer.")


@pytest.mark.serial
def test_a_reply_dripping_past_the_deadline_halts_the_run_and_the_server_is_left(
    on_server, alice, published, recall_ready
):
    on_server.reply("word " * 400, drip=0.2)

    run = execute_run(start_run(alice, "Write a long essay", limits=default_limits(max_seconds=2)))

    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "deadline")
    assert published  # it was coming in when the deadline cut it off
    [sent] = wait_for(lambda: on_server.streams, "the fake to stop dripping")
    assert sent.client_left
    assert sent.chunks < sent.of


def test_a_reply_slower_than_loop_openai_timeout_is_retried_then_fails_saying_so(
    on_server, settings, alice, waits
):
    settings.LOOP_OPENAI_TIMEOUT = 1  # a local model on a slow machine
    on_server.reply("too late", delay=3, times=2)

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert len(on_server.requests) == 2
    assert len(waits) == 1
    assert run.error == (
        f"Model failed: The model server at {on_server.base_url} did not answer within 1 "
        "second, on each of 2 attempts."
    )


# --- a server that is not there, a model that is not there ---------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 where nothing listens (bound, so no one else takes it meanwhile)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def test_a_server_that_is_down_fails_the_run_at_once_naming_its_url(
    on_server, settings, alice, waits, closed_port
):
    url = f"http://127.0.0.1:{closed_port}/v1"
    settings.LOOP_OPENAI_BASE_URL = url

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert run.error.startswith(f"Model failed: Could not reach the model server at {url} (")
    assert "Is it running, and is LOOP_OPENAI_BASE_URL right?" in run.error
    assert "manage.py modelcheck" in run.error
    assert waits == []  # refused: nothing to wait for


def test_a_server_url_with_a_password_is_never_shown_with_it(
    on_server, settings, alice, closed_port
):
    settings.LOOP_OPENAI_BASE_URL = f"http://loop:s3cret-pw@127.0.0.1:{closed_port}/v1"

    run = execute_run(start_run(alice, "List my files"))

    assert run.status == RunStatus.FAILED
    assert f"the model server at http://127.0.0.1:{closed_port}/v1 (" in run.error
    recorded = json.dumps(list(run.events.values_list("data", flat=True)))
    assert "s3cret-pw" not in run.error + run.answer + recorded


def test_a_model_the_server_does_not_have_fails_the_run_at_once_naming_the_setting(
    on_server, settings, alice, waits
):
    settings.LOOP_OPENAI_MODEL = "qwen2.5:7b"

    run = execute_run(start_run(alice, "List my files"))

    assert (run.status, run.model) == (RunStatus.FAILED, "qwen2.5:7b")
    assert len(on_server.requests) == 1
    assert waits == []
    assert run.error == (
        f"Model failed: The model server at {on_server.base_url} has no model 'qwen2.5:7b' "
        '(model "qwen2.5:7b" not found, try pulling it first). Set LOOP_OPENAI_MODEL (or '
        "LOOP_MODEL, or runagent --model) to one it has; `manage.py modelcheck` lists them."
    )


# --- the run's recorded model decides -----------------------------------------------------------


def test_a_queued_run_stays_on_the_server_it_was_queued_for(on_server, settings, alice):
    run = start_run(alice, "Say hello", model="qwen3:8b")  # bare: the server's, no Groq key
    settings.GROQ_API_KEY = "gsk_test"  # a bare qwen3:8b would be Groq's now
    on_server.reply("Hello.")

    run = execute_run(run)

    assert (run.provider, run.model, run.status) == ("openai", "qwen3:8b", RunStatus.SUCCEEDED)
    assert on_server.requests[0].body["model"] == "qwen3:8b"


def test_a_queued_run_whose_server_was_unset_fails_saying_what_to_set(on_server, settings, alice):
    run = start_run(alice, "Say hello")
    settings.LOOP_OPENAI_BASE_URL = ""

    run = execute_run(run)

    assert run.status == RunStatus.FAILED
    assert run.error.startswith(
        f"The run could not start: Model '{MODEL}' runs on an OpenAI-compatible server and "
        "needs LOOP_OPENAI_BASE_URL"
    )
    assert on_server.requests == []


# --- runagent ------------------------------------------------------------------------------------


def test_runagent_with_an_openai_model_prints_the_transcript_of_its_run(on_server, settings):
    settings.LOOP_OPENAI_MODEL = "qwen3:8b"  # --model names another of the server's models
    on_server.reply(tool_calls=[tool_call("run_code", {"code": SUM_CODE})])
    on_server.reply(tool_calls=[tool_call("write_file", {"path": "sum.txt", "content": "5050\n"})])
    on_server.reply(ANSWER)

    code, out = runagent(DEMO, "--model", f"openai:{MODEL}")

    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Task: {DEMO}", f"Model: openai {MODEL}"]
    assert f"step 1  run_code {json.dumps({'code': SUM_CODE})}" in lines
    assert any(line.startswith("        run_code ok in ") and "5050" in line for line in lines)
    assert 'step 2  write_file {"path": "sum.txt", "content": "5050\\n"}' in lines
    assert ANSWER in lines
    run = AgentRun.objects.get()
    assert (run.provider, run.model) == ("openai", MODEL)
    assert lines[-1].startswith(f"Run {run.pk} succeeded after 3 model turns, 2 tool calls,")
    assert {request.body["model"] for request in on_server.requests} == {MODEL}


def test_runagent_never_prints_a_terminal_escape_the_model_sent(on_server):
    """An answer that would write the operator's clipboard (OSC 52) and clear the screen."""
    on_server.reply("\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2JDone.\x9b31m")

    code, out = runagent("Say done", "--model", f"openai:{MODEL}")

    assert code == 0
    assert not any(character in out for character in "\x1b\x07\x9b")
    assert "?]52;c;ZWNobyBwd25lZA==??[2JDone.?31m" in out.splitlines()


def test_runagent_on_a_model_the_server_does_not_have_exits_1_naming_the_fix(on_server):
    code, out = runagent("List my files", "--model", "openai:qwen2.5:7b")

    assert code == 1
    assert "Error: Model failed: The model server at " in out
    assert "has no model 'qwen2.5:7b'" in out
    assert "`manage.py modelcheck` lists them." in out


def test_runagent_takes_a_bare_ollama_name_with_its_colon(on_server):
    on_server.reply("Hello.")

    code, out = runagent("Say hello", "--model", "qwen3:8b")

    assert code == 0
    assert out.splitlines()[1] == "Model: openai qwen3:8b"
    assert on_server.requests[0].body["model"] == "qwen3:8b"


def test_runagent_on_a_provider_that_is_not_configured_exits_2_before_any_run(on_server):
    with pytest.raises(CommandError, match="runs on Groq and needs GROQ_API_KEY") as refused:
        call_command("runagent", "Say hello", "--model", "groq:openai/gpt-oss-20b")

    assert refused.value.returncode == 2
    assert not AgentRun.objects.exists()


def test_manage_py_runagent_on_the_server_from_the_environment_alone(
    manage, child_database_url, workspaces, openai_server
):
    """A separate process configured by its environment only, as a person runs it, with its
    system checks: keyless, no LOOP_MODEL, the reasoning in <think> tags shown as reasoning."""
    openai_server.behave(reasoning="think")
    openai_server.reply(tool_calls=[tool_call("list_files", {})], reasoning="I should look.")
    openai_server.reply("Your workspace is empty.")
    env = {
        "DATABASE_URL": child_database_url,
        "LOOP_WORKSPACES_DIR": str(workspaces),
        "GROQ_API_KEY": "",
        "LOOP_MODEL": "",
        "LOOP_MODELS": "",
        "LOOP_OPENAI_BASE_URL": openai_server.base_url,
        "LOOP_OPENAI_MODEL": MODEL,
    }

    done = manage("runagent", "List my files", "--model", f"openai:{MODEL}", env=env)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == f"Model: openai {MODEL}"
    assert "step 1  reasoning: I should look." in lines
    assert "step 1  list_files {}" in lines
    assert "Your workspace is empty." in lines
    assert "<think>" not in done.stdout
    assert AgentRun.objects.get().provider == "openai"
