"""GroqLLM against a fake Groq server over real HTTP: the request it sends, the reply it parses,
and how retries, rate limits and Groq's rejected replies end up (a reply or an LLMError)."""

import json
import socket
import time

import pytest

from agent.llm.groq import GroqLLM
from core.llm import LLM, LLMError, Message, Reply, ToolCall, ToolSpec, Usage
from core.loop import ask_correcting
from tests.groq_server import CHAT_COMPLETIONS_PATH, groq_server_fixture, tool_call  # noqa: F401

MODEL = "openai/gpt-oss-120b"
API_KEY = "gsk_test_key"
FAST_RETRY = {"retry-after-ms": "50"}  # Loop's own backoff starts at 0.5 s

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the files of the workspace.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

QUESTION = [
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "What is in notes.txt?"},
]


def make_llm(server, **options) -> GroqLLM:
    return GroqLLM(MODEL, api_key=API_KEY, base_url=server.base_url, **options)


def corrected(llm: LLM, messages: list[Message], tools: list[ToolSpec] | None) -> Reply:
    """A turn as the loop asks it: the model's mistakes fed back to it (core.loop)."""
    return ask_correcting(lambda sent: llm.chat(sent, tools), messages)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- replies -------------------------------------------------------------------------------------


def test_a_text_reply_is_returned_with_its_usage(groq_server):
    groq_server.reply("notes.txt says hello.", usage=(42, 7))

    reply = make_llm(groq_server).chat(QUESTION, TOOLS)

    assert reply.text == "notes.txt says hello."
    assert reply.tool_calls == ()
    assert reply.usage == Usage(prompt_tokens=42, completion_tokens=7)
    assert reply.usage.total_tokens == 49
    assert reply.recovered_error == ""


def test_two_parallel_tool_calls_are_parsed_in_order(groq_server):
    groq_server.reply(
        None,
        tool_calls=[
            tool_call("read_file", {"path": "notes.txt"}, id="call_a"),
            tool_call("list_files", {}, id="call_b"),
        ],
    )

    reply = make_llm(groq_server).chat(QUESTION, TOOLS)

    assert reply.text == ""
    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "notes.txt"}'),
        ToolCall("call_b", "list_files", "{}"),
    )


def test_tool_call_arguments_are_kept_as_the_raw_text_the_model_sent(groq_server):
    groq_server.reply(tool_calls=[tool_call("read_file", '{"path":  "a.txt" }', id="call_raw")])

    reply = make_llm(groq_server).chat(QUESTION, TOOLS)

    assert reply.tool_calls == (ToolCall("call_raw", "read_file", '{"path":  "a.txt" }'),)


def test_text_and_tool_calls_in_one_reply_are_both_returned(groq_server):
    groq_server.reply("Let me look.", tool_calls=[tool_call("list_files", {}, id="call_1")])

    reply = make_llm(groq_server).chat(QUESTION, TOOLS)

    assert reply.text == "Let me look."
    assert [call.name for call in reply.tool_calls] == ["list_files"]


# --- the request ---------------------------------------------------------------------------------


def test_the_request_carries_model_messages_tools_and_tool_choice_auto(groq_server):
    groq_server.reply("ok")

    make_llm(groq_server).chat(QUESTION, TOOLS)

    [request] = groq_server.requests
    assert request.method == "POST"
    assert request.path == CHAT_COMPLETIONS_PATH
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": MODEL,
        "messages": QUESTION,
        "tools": TOOLS,
        "tool_choice": "auto",
    }


@pytest.mark.parametrize("tools", [None, []])
def test_without_tools_the_request_has_no_tools_and_no_tool_choice(groq_server, tools):
    groq_server.reply("plain text")

    reply = make_llm(groq_server).chat(QUESTION, tools)

    assert reply.text == "plain text"
    assert groq_server.requests[0].body == {"model": MODEL, "messages": QUESTION}


def test_a_multi_turn_history_with_tool_calls_and_results_is_sent_in_openai_format(groq_server):
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "hello"},
        {"role": "tool", "tool_call_id": "call_b", "content": '["notes.txt"]'},
    ]
    sent = json.loads(json.dumps(history))
    groq_server.reply("notes.txt says hello.")

    make_llm(groq_server).chat(history, TOOLS)

    messages = groq_server.requests[0].messages
    assert messages == sent
    assistant = messages[2]
    assert "content" in assistant
    assert assistant["content"] is None
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_a", "content": "hello"}
    assert history == sent  # the caller's history is left as it was


def test_tool_call_message_parts_round_trip_into_the_next_request(groq_server):
    groq_server.reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})])
    groq_server.reply("done")
    llm = make_llm(groq_server)

    first = llm.chat(QUESTION, TOOLS)
    [call] = first.tool_calls
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.as_message_part()]},
        {"role": "tool", "tool_call_id": call.id, "content": "hello"},
    ]
    llm.chat(history, TOOLS)

    sent = groq_server.requests[1].messages
    assert sent[2]["tool_calls"] == [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
        }
    ]
    assert sent[3] == {"role": "tool", "tool_call_id": call.id, "content": "hello"}


# --- retries (Loop's own) ------------------------------------------------------------------------


def test_a_429_is_retried_after_its_retry_after_and_the_reply_returned(groq_server):
    groq_server.fail(429, "Rate limit reached", headers={"Retry-After": "1"})
    groq_server.reply("after the wait")

    reply = make_llm(groq_server).chat(QUESTION, TOOLS)

    assert reply.text == "after the wait"
    first, second = groq_server.requests
    assert second.at - first.at >= 0.9
    assert second.body == first.body


def test_a_5xx_is_retried_up_to_max_retries_and_then_succeeds(groq_server):
    groq_server.fail(500, "Internal server error", headers=FAST_RETRY, times=2)
    groq_server.reply("third time lucky")

    reply = make_llm(groq_server, max_retries=2).chat(QUESTION, TOOLS)

    assert reply.text == "third time lucky"
    assert len(groq_server.requests) == 3  # one layer of retries, Loop's


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_persistent_5xx_becomes_an_llm_error_after_max_retries(groq_server, max_retries):
    groq_server.fail(500, "Internal server error", headers=FAST_RETRY, times=10)

    with pytest.raises(LLMError, match="500") as raised:
        make_llm(groq_server, max_retries=max_retries).chat(QUESTION, TOOLS)

    assert "Internal server error" in str(raised.value)
    assert len(groq_server.requests) == max_retries + 1


def test_a_persistent_429_becomes_an_llm_error_after_max_retries(groq_server):
    groq_server.fail(429, "Rate limit reached for tokens", headers=FAST_RETRY, times=10)

    with pytest.raises(LLMError, match="rate limit was reached: Rate limit reached for tokens"):
        make_llm(groq_server, max_retries=1).chat(QUESTION, TOOLS)

    assert len(groq_server.requests) == 2


def test_a_5xx_without_a_json_body_becomes_an_llm_error(groq_server):
    groq_server.fail(502, body="<html>Bad Gateway</html>", headers=FAST_RETRY, times=10)

    with pytest.raises(LLMError, match="502"):
        make_llm(groq_server, max_retries=0).chat(QUESTION, TOOLS)

    assert len(groq_server.requests) == 1


def test_a_401_is_an_llm_error_at_once(groq_server):
    groq_server.fail(401, "Invalid API Key", code="invalid_api_key", times=10)

    with pytest.raises(LLMError, match="401: Invalid API Key"):
        make_llm(groq_server, max_retries=2).chat(QUESTION, TOOLS)

    assert len(groq_server.requests) == 1


def test_a_400_that_is_not_tool_use_failed_is_an_llm_error_with_the_servers_message(groq_server):
    message = "Please reduce the length of the messages or completion."
    groq_server.fail(400, message, code="context_length_exceeded", times=10)

    with pytest.raises(LLMError, match="400") as raised:
        make_llm(groq_server, max_retries=2).chat(QUESTION, TOOLS)

    assert message in str(raised.value)
    assert len(groq_server.requests) == 1


# --- timeouts and unreachable servers ------------------------------------------------------------


def test_a_server_slower_than_the_timeout_is_an_llm_error(groq_server):
    groq_server.reply("too late", delay=5)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"did not answer within 0\.5 seconds"):
        make_llm(groq_server, timeout=0.5, max_retries=0).chat(QUESTION, TOOLS)

    assert time.monotonic() - started < 3
    assert len(groq_server.requests) == 1


def test_a_timeout_is_retried_each_attempt_getting_the_full_timeout(groq_server):
    groq_server.reply("too late", delay=5, times=2)

    started = time.monotonic()
    with pytest.raises(LLMError, match="did not answer"):
        make_llm(groq_server, timeout=0.3, max_retries=1).chat(QUESTION, TOOLS)

    # Two attempts of 0.3 s each (plus backoff): more than the 0.3 s the error message names.
    assert time.monotonic() - started >= 0.6
    assert len(groq_server.requests) == 2


def test_a_refused_connection_is_an_llm_error():
    llm = GroqLLM(
        MODEL, api_key=API_KEY, base_url=f"http://127.0.0.1:{closed_port()}", max_retries=0
    )

    with pytest.raises(LLMError, match="Could not reach Groq"):
        llm.chat(QUESTION, TOOLS)


# --- tool_use_failed -----------------------------------------------------------------------------


def test_tool_use_failed_is_fed_back_once_and_the_next_reply_returned(groq_server):
    failed = '<function=read_file>{"path": notes.txt}</function>'
    groq_server.tool_use_failed(failed)
    groq_server.reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"}, id="call_ok")])

    reply = corrected(make_llm(groq_server), QUESTION, TOOLS)

    assert reply.tool_calls == (ToolCall("call_ok", "read_file", '{"path": "notes.txt"}'),)
    first, second = groq_server.requests
    assert first.messages == QUESTION
    assert second.body["tools"] == TOOLS
    assert second.body["tool_choice"] == "auto"
    *resent, note = second.messages
    assert resent == QUESTION
    assert note["role"] == "user"
    assert note["content"].startswith("[Loop] Your last reply was rejected")
    assert "Call one of the tools you have (read_file, list_files)" in note["content"]
    assert failed in note["content"]
    assert reply.recovered_error == note["content"]


def test_tool_use_failed_twice_in_a_row_is_an_llm_error(groq_server):
    groq_server.tool_use_failed("<function=read_file>{bad</function>", times=2)

    with pytest.raises(LLMError, match="400") as raised:
        corrected(make_llm(groq_server), QUESTION, TOOLS)

    assert "again" in str(raised.value)
    assert len(groq_server.requests) == 2


def test_tool_use_failed_is_fed_back_not_retried_unchanged(groq_server):
    groq_server.tool_use_failed("<function=list_files>[</function>")
    groq_server.reply("I will answer in text instead.")

    reply = corrected(make_llm(groq_server, max_retries=2), QUESTION, TOOLS)

    assert reply.text == "I will answer in text instead."
    first, second = groq_server.requests
    assert len(second.messages) == len(first.messages) + 1


# --- streaming -----------------------------------------------------------------------------------


def streaming_llm(server, heard: list[str]) -> GroqLLM:
    llm = make_llm(server)
    llm.deltas = heard.append
    return llm


def test_a_streamed_answer_reaches_deltas_in_pieces_and_is_returned_whole(groq_server):
    answer = "notes.txt says hello, and nothing else at all."
    groq_server.reply(answer, usage=(42, 11), reasoning="Read it, then answer.")
    heard: list[str] = []

    reply = streaming_llm(groq_server, heard).chat(QUESTION, TOOLS)

    assert groq_server.requests[0].body["stream"] is True
    assert len(heard) > 1
    assert "".join(heard) == answer == reply.text
    assert reply.usage == Usage(prompt_tokens=42, completion_tokens=11)
    assert reply.reasoning == "Read it, then answer."
    assert "Read it" not in "".join(heard)  # the reasoning is not the answer


def test_streamed_tool_calls_are_assembled_from_their_pieces(groq_server):
    groq_server.reply(
        tool_calls=[
            tool_call("read_file", {"path": "a-rather-long-name.txt"}, id="call_a"),
            tool_call("list_files", {}, id="call_b"),
        ]
    )
    heard: list[str] = []

    reply = streaming_llm(groq_server, heard).chat(QUESTION, TOOLS)

    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "a-rather-long-name.txt"}'),
        ToolCall("call_b", "list_files", "{}"),
    )
    assert heard == []


def test_a_rejected_streamed_request_is_handled_like_any_other(groq_server):
    groq_server.tool_not_in_request("repo_browser.open_file")
    groq_server.reply("Answered in text.")
    heard: list[str] = []

    reply = corrected(streaming_llm(groq_server, heard), QUESTION, TOOLS)

    assert reply.text == "Answered in text."
    assert "repo_browser.open_file" in reply.recovered_error
