"""OpenAICompatibleLLM against a fake OpenAI-compatible server over real HTTP, through the real
`openai` client: each quirk real servers have (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter,
OpenAI itself), and how rate limits, outages, timeouts and wrong settings end up (a reply, an
LLMError that says what to change, or ModelTimedOut)."""

import logging
import socket

import pytest

from agent.llm.mistakes import SERVER_FLAGS_HINT, TEXT_TOOL_CALL_NOTE
from agent.llm.openai_compat import NO_KEY, OpenAICompatibleLLM
from agent.llm.replies import ReplyPieces, sse_data
from core.llm import LLMError, ModelTimedOut, ToolCall, Usage
from tests.conftest import wait_for
from tests.openai_server import (  # noqa: F401 (the fixture)
    MODEL,
    STREAM_OPTIONS_REFUSED,
    openai_server_fixture,
    tool_call,
)
from tests.test_groq import QUESTION, TOOLS, corrected

FAST_RETRY = {"retry-after-ms": "50"}
ANSWER = "notes.txt says hello, and nothing else at all."
THOUGHT = "The user wants the file. I read it earlier: it says hello."
CALLS = [
    tool_call("read_file", {"path": "a-rather-long-name.txt"}),
    tool_call("list_files", {}),
]
CALLED = [("read_file", '{"path": "a-rather-long-name.txt"}'), ("list_files", "{}")]


def make_llm(server, model: str = MODEL, **options) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(model, base_url=server.base_url, **options)


def streaming_llm(server, heard: list[str], **options) -> OpenAICompatibleLLM:
    return make_llm(server, deltas=heard.append, **options)


def either_llm(server, streamed: bool, heard: list[str] | None = None) -> OpenAICompatibleLLM:
    return streaming_llm(server, [] if heard is None else heard) if streamed else make_llm(server)


def called(reply) -> list[tuple[str, str]]:
    return [(call.name, call.arguments) for call in reply.tool_calls]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


streamed_or_whole = pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])


# --- the request -----------------------------------------------------------------------------


def test_the_request_carries_model_messages_tools_and_tool_choice_auto(openai_server):
    openai_server.reply("ok")

    make_llm(openai_server).chat(QUESTION, TOOLS)

    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == MODEL
    assert request.body["messages"] == QUESTION
    assert request.body["tools"] == TOOLS
    assert request.body["tool_choice"] == "auto"
    assert "reasoning_effort" not in request.body  # only when configured


def test_reasoning_effort_is_sent_when_configured(openai_server):
    openai_server.reply("ok")

    make_llm(openai_server, reasoning_effort="low").chat(QUESTION, TOOLS)

    assert openai_server.requests[0].body["reasoning_effort"] == "low"


def test_the_key_is_sent_as_a_bearer_token_when_set(openai_server):
    openai_server.behave(requires_key="sk-local-secret")
    openai_server.reply("ok")

    reply = make_llm(openai_server, api_key="sk-local-secret").chat(QUESTION, TOOLS)

    assert reply.text == "ok"
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-local-secret"


def test_a_keyless_server_gets_the_placeholder_key(openai_server):
    openai_server.reply("ok")

    make_llm(openai_server).chat(QUESTION, TOOLS)

    assert openai_server.requests[0].headers["authorization"] == f"Bearer {NO_KEY}"


def test_a_key_the_server_refuses_is_an_llm_error_at_once(openai_server):
    openai_server.behave(requires_key="sk-right")

    with pytest.raises(LLMError, match="answered 401: Incorrect API key provided") as raised:
        make_llm(openai_server, api_key="sk-wrong", max_retries=2).chat(QUESTION, TOOLS)

    assert raised.value.status == 401  # what a check reads to say "set LOOP_OPENAI_API_KEY"
    assert len(openai_server.requests) == 1


def test_the_servers_models_are_listed(openai_server):
    assert make_llm(openai_server).available_models() == ["llama3.1:8b", "qwen3:8b"]
    assert [request.path for request in openai_server.requests] == ["/v1/models"]


# --- usage -----------------------------------------------------------------------------------


def test_a_streamed_reply_asks_for_its_usage_and_gets_it(openai_server):
    openai_server.reply(ANSWER, usage=(42, 11))
    heard: list[str] = []

    reply = streaming_llm(openai_server, heard).chat(QUESTION, TOOLS)

    assert openai_server.requests[0].body["stream_options"] == {"include_usage": True}
    assert reply.usage == Usage(prompt_tokens=42, completion_tokens=11)
    assert "".join(heard) == ANSWER == reply.text
    assert len(heard) > 1  # in pieces, as they came


def test_a_whole_reply_has_its_usage_and_is_not_sent_stream_options(openai_server):
    openai_server.reply(ANSWER, usage=(42, 11))

    reply = make_llm(openai_server).chat(QUESTION, TOOLS)

    assert "stream_options" not in openai_server.requests[0].body  # OpenAI's 400 without stream
    assert reply.usage == Usage(prompt_tokens=42, completion_tokens=11)


def test_a_server_that_refuses_stream_options_is_asked_again_without_and_remembered(
    openai_server, caplog
):
    # Such a server sends usage unasked, or none; this one sends it.
    openai_server.behave(rejects_stream_options=True, usage_only_when_asked=False)
    openai_server.reply(ANSWER, usage=(42, 11))
    openai_server.reply("second turn")

    with caplog.at_level(logging.INFO, logger="agent.llm.openai"):
        first = streaming_llm(openai_server, []).chat(QUESTION, TOOLS)
    # Another client for the same server (the next run): it is not asked with the option again.
    second = streaming_llm(openai_server, []).chat(QUESTION, TOOLS)

    assert (first.text, first.usage, first.retried) == (ANSWER, Usage(42, 11), ())
    assert second.text == "second turn"
    refused, asked_again, next_turn = openai_server.requests
    assert refused.body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in asked_again.body
    assert "stream_options" not in next_turn.body
    assert asked_again.body == {k: v for k, v in refused.body.items() if k != "stream_options"}
    assert "does not take stream_options" in caplog.text


def test_another_400_about_a_streamed_request_is_not_taken_for_a_refused_option(openai_server):
    openai_server.fail(400, "Please reduce the length of the messages.", times=2)

    with pytest.raises(LLMError, match="answered 400: Please reduce the length") as raised:
        streaming_llm(openai_server, []).chat(QUESTION, TOOLS)

    assert raised.value.status == 400
    assert len(openai_server.requests) == 1


# --- tool calls --------------------------------------------------------------------------------


@pytest.mark.parametrize("whole", [False, True], ids=["arguments-in-pieces", "arguments-whole"])
def test_streamed_tool_calls_are_assembled_in_pieces_or_whole(openai_server, whole):
    openai_server.behave(whole_tool_calls=whole)
    openai_server.reply(tool_calls=[{**CALLS[0], "id": "call_a"}, {**CALLS[1], "id": "call_b"}])
    heard: list[str] = []

    reply = streaming_llm(openai_server, heard).chat(QUESTION, TOOLS)

    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "a-rather-long-name.txt"}'),
        ToolCall("call_b", "list_files", "{}"),
    )
    assert (reply.text, heard) == ("", [])


@streamed_or_whole
def test_tool_calls_without_ids_get_ids_of_their_own(openai_server, streamed):
    openai_server.behave(call_ids=False)
    openai_server.reply(tool_calls=CALLS)
    openai_server.reply("done")
    llm = either_llm(openai_server, streamed)

    reply = llm.chat(QUESTION, TOOLS)

    assert called(reply) == CALLED
    ids = [call.id for call in reply.tool_calls]
    assert all(id.startswith("call_") and len(id) > len("call_") for id in ids)
    assert len(set(ids)) == 2
    # The ids tie each result to its call in the next request.
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [c.as_message_part() for c in reply.tool_calls],
        },
        *({"role": "tool", "tool_call_id": id, "content": "result"} for id in ids),
    ]
    llm.chat(history, TOOLS)
    sent = openai_server.requests[1].messages
    assert [c["id"] for c in sent[2]["tool_calls"]] == ids
    assert [m["tool_call_id"] for m in sent[3:]] == ids


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
@pytest.mark.parametrize("whole", [False, True], ids=["arguments-in-pieces", "arguments-whole"])
def test_streamed_tool_call_pieces_without_an_index_are_told_apart(openai_server, ids, whole):
    openai_server.behave(call_index=False, call_ids=ids, whole_tool_calls=whole)
    openai_server.reply(tool_calls=CALLS)

    reply = streaming_llm(openai_server, []).chat(QUESTION, TOOLS)

    assert called(reply) == CALLED
    assert len({call.id for call in reply.tool_calls}) == 2


@streamed_or_whole
def test_tool_calls_that_finish_with_stop_are_still_calls(openai_server, streamed):
    openai_server.behave(finish_with_calls="stop")
    openai_server.reply(tool_calls=CALLS)

    reply = either_llm(openai_server, streamed).chat(QUESTION, TOOLS)

    assert called(reply) == CALLED
    assert reply.cut is False


# --- reasoning ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["reasoning_content", "reasoning", "think"])
@streamed_or_whole
def test_reasoning_is_kept_apart_from_the_answer(openai_server, where, streamed):
    openai_server.behave(reasoning=where)
    openai_server.reply(ANSWER, reasoning=THOUGHT)
    heard: list[str] = []

    reply = either_llm(openai_server, streamed, heard).chat(QUESTION, TOOLS)

    assert (reply.text, reply.reasoning) == (ANSWER, THOUGHT)
    if streamed:
        assert "".join(heard) == ANSWER  # the answer streamed, the thinking never shown


@streamed_or_whole
def test_thinking_in_tags_before_a_tool_call_leaves_no_text(openai_server, streamed):
    openai_server.behave(reasoning="think")
    openai_server.reply(tool_calls=CALLS[:1], reasoning=THOUGHT)
    heard: list[str] = []

    reply = either_llm(openai_server, streamed, heard).chat(QUESTION, TOOLS)

    assert (reply.text, reply.reasoning, called(reply)) == ("", THOUGHT, CALLED[:1])
    assert heard == []


# --- a server that cannot call tools -----------------------------------------------------------


@pytest.mark.parametrize("server", ["ollama", "vllm", "llamacpp"])
@streamed_or_whole
def test_a_server_that_cannot_call_tools_is_a_clear_error_at_once(openai_server, server, streamed):
    openai_server.behave(no_tools=server)
    openai_server.reply("unused")  # what a turn without tools would get

    with pytest.raises(LLMError) as raised:
        either_llm(openai_server, streamed).chat(QUESTION, TOOLS)

    message = str(raised.value)
    assert message.startswith(f"{MODEL} on the model server at {openai_server.base_url} ")
    assert "cannot call tools" in message
    assert "docs/models.md" in message
    assert len(openai_server.requests) == 1  # llama.cpp says it with a 500: never asked again
    # A turn without tools works on the same server.
    assert make_llm(openai_server).chat(QUESTION, None).text == "unused"


# --- a tool call written as text ---------------------------------------------------------------

CALL_AS_JSON = '{"name": "read_file", "arguments": {"path": "notes.txt"}}'
WRITTEN_CALLS = {
    "bare": CALL_AS_JSON,
    "fenced": f"```json\n{CALL_AS_JSON}\n```",
    "tagged": f"<tool_call>\n{CALL_AS_JSON}\n</tool_call>",
    "parameters": '{"name": "read_file", "parameters": {"path": "notes.txt"}}',
}


@pytest.mark.parametrize("written", WRITTEN_CALLS.values(), ids=WRITTEN_CALLS.keys())
@streamed_or_whole
def test_a_tool_call_written_as_text_is_fed_back_once(openai_server, written, streamed):
    openai_server.reply(written)
    openai_server.reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})])
    heard: list[str] = []

    reply = corrected(either_llm(openai_server, streamed, heard), QUESTION, TOOLS)

    assert called(reply) == [("read_file", '{"path": "notes.txt"}')]
    note = TEXT_TOOL_CALL_NOTE.format(name="read_file")
    assert reply.recovered_error == note
    first, second = openai_server.requests
    assert second.messages == [*first.messages, {"role": "user", "content": note}]
    if streamed:
        assert "wrote a tool call as text; Loop asked it again" in "".join(heard)


def test_a_tool_call_written_as_text_twice_is_a_clear_failure(openai_server):
    openai_server.reply(WRITTEN_CALLS["fenced"], times=2)

    with pytest.raises(LLMError) as raised:
        corrected(make_llm(openai_server), QUESTION, TOOLS)

    message = str(raised.value)
    assert message.startswith(f"{MODEL} on the model server at {openai_server.base_url} wrote")
    assert "read_file" in message
    assert "twice" in message
    assert SERVER_FLAGS_HINT in message
    assert len(openai_server.requests) == 2


@pytest.mark.parametrize(
    "text",
    [
        '{"sum": 5050}',  # an answer that is JSON
        '{"name": "delete_everything", "arguments": {}}',  # no such tool
        '{"name": "list_files", "description": "Lists the files."}',  # a tool described
        f"Here is how you would call it: {CALL_AS_JSON}",  # prose about a call
    ],
    ids=["json-answer", "unknown-tool", "a-tool-described", "prose"],
)
def test_text_that_is_not_a_written_tool_call_is_the_answer(openai_server, text):
    openai_server.reply(text)

    reply = make_llm(openai_server).chat(QUESTION, TOOLS)

    assert (reply.text, reply.recovered_error) == (text, "")
    assert len(openai_server.requests) == 1


def test_a_written_tool_call_in_a_turn_without_tools_is_the_answer(openai_server):
    openai_server.reply(CALL_AS_JSON)

    assert make_llm(openai_server).chat(QUESTION, None).text == CALL_AS_JSON
    assert len(openai_server.requests) == 1


# --- retries -----------------------------------------------------------------------------------


def test_a_429_is_retried_after_its_retry_after(openai_server):
    # Were retry-after missed, the 20 s the tokens' window takes would not fit the 10 s left.
    openai_server.rate_limited(retry_after=1, reset_tokens="20s")
    openai_server.reply("after the wait")

    reply = make_llm(openai_server).chat(QUESTION, TOOLS, timeout=10)

    assert reply.text == "after the wait"
    first, second = openai_server.requests
    assert second.at - first.at >= 1  # the wait the server asked for, at least
    assert second.body == first.body
    [retried] = reply.retried
    assert retried.startswith("The model server's rate limit was reached: Rate limit reached")


def test_a_429_whose_wait_does_not_fit_the_time_left_fails_saying_when(openai_server):
    openai_server.rate_limited(retry_after=30)

    with pytest.raises(LLMError, match=r"rate limit was reached.*Try again in 30 seconds"):
        make_llm(openai_server).chat(QUESTION, TOOLS, timeout=5)

    assert len(openai_server.requests) == 1


def test_a_500_then_success_returns_the_reply(openai_server):
    openai_server.fail(500, "Internal server error", headers=FAST_RETRY)
    openai_server.reply("second time lucky")

    reply = make_llm(openai_server).chat(QUESTION, TOOLS)

    assert reply.text == "second time lucky"
    assert reply.retried == (
        f"The model server at {openai_server.base_url} answered 500: Internal server error",
    )
    assert len(openai_server.requests) == 2


def test_a_stream_cut_short_is_asked_for_again(openai_server):
    openai_server.reply(ANSWER, cut_after=3)
    openai_server.reply(ANSWER)
    heard: list[str] = []

    reply = streaming_llm(openai_server, heard).chat(QUESTION, TOOLS)

    assert reply.text == ANSWER
    assert "The model server's reply broke off; Loop asked for it again." in "".join(heard)
    assert len(openai_server.requests) == 2


# --- time, and servers that are not there --------------------------------------------------------


def test_a_reply_slower_than_the_time_the_run_has_left_times_out_on_the_deadline(openai_server):
    openai_server.reply("too late", delay=30)

    with pytest.raises(ModelTimedOut, match=r"did not finish its reply within the 0\.5 seconds"):
        make_llm(openai_server, max_retries=2).chat(QUESTION, TOOLS, timeout=0.5)

    assert len(openai_server.requests) == 1  # the time is up: no retry


def test_a_reply_dripping_in_past_the_deadline_is_cut_off(openai_server):
    openai_server.reply("word " * 200, drip=0.1)
    heard: list[str] = []

    with pytest.raises(ModelTimedOut):
        streaming_llm(openai_server, heard).chat(QUESTION, TOOLS, timeout=1)

    assert heard  # it was coming in
    [sent] = wait_for(lambda: openai_server.streams, "the server to stop dripping")
    assert sent.client_left
    assert sent.chunks < sent.of


def test_a_server_that_is_down_fails_at_once_naming_its_url(caplog):
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    llm = OpenAICompatibleLLM(MODEL, base_url=base_url, max_retries=2)

    with (
        caplog.at_level(logging.WARNING, logger="agent.llm.openai"),
        pytest.raises(LLMError) as raised,
    ):
        llm.chat(QUESTION, TOOLS, timeout=30)

    message = str(raised.value)
    assert message.startswith(f"Could not reach the model server at {base_url} (")
    assert "LOOP_OPENAI_BASE_URL" in message
    assert "modelcheck" in message
    assert "retrying" not in caplog.text  # nothing listens there: not asked again
    assert raised.value.status is None  # no answer, so no status


@pytest.mark.parametrize("listing", [False, True], ids=["chat", "models"])
def test_a_password_in_the_base_url_is_never_shown(listing):
    port = closed_port()
    llm = OpenAICompatibleLLM(
        MODEL, base_url=f"http://loop:hunter2-secret@127.0.0.1:{port}/v1", max_retries=0
    )

    with pytest.raises(LLMError) as raised:
        llm.available_models() if listing else llm.chat(QUESTION, TOOLS)

    message = str(raised.value)
    assert f"the model server at http://127.0.0.1:{port}/v1" in message
    assert "hunter2" not in message
    assert "loop:" not in message


def test_a_model_the_server_does_not_have_names_the_setting_and_modelcheck(openai_server):
    with pytest.raises(LLMError) as raised:
        make_llm(openai_server, model="qwen3:32b", max_retries=2).chat(QUESTION, TOOLS)

    message = str(raised.value)
    assert "has no model 'qwen3:32b'" in message
    assert 'model "qwen3:32b" not found, try pulling it first' in message
    assert "LOOP_OPENAI_MODEL" in message
    assert "manage.py modelcheck" in message
    assert raised.value.status == 404
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "The model `gpt-5` does not exist.", "code": "model_not_found"}},
        {"object": "error", "message": "The model `gpt-5` does not exist.", "code": 404},
    ],
    ids=["openai", "vllm"],
)
def test_other_servers_words_for_a_missing_model_name_the_setting(openai_server, body):
    openai_server.fail(404, body=body)

    with pytest.raises(LLMError, match=r"LOOP_OPENAI_MODEL.*modelcheck"):
        make_llm(openai_server).chat(QUESTION, TOOLS)


def test_a_base_url_without_v1_is_a_404_that_asks_about_the_base_url(openai_server):
    base_url = openai_server.base_url.removesuffix("/v1")
    llm = OpenAICompatibleLLM(MODEL, base_url=base_url, max_retries=2)

    with pytest.raises(LLMError) as raised:
        llm.chat(QUESTION, TOOLS)

    message = str(raised.value)
    assert "answered 404 for /chat/completions" in message
    assert "Is its base URL right?" in message
    assert "/v1" in message
    assert "LOOP_OPENAI_MODEL" not in message  # not taken for a missing model
    assert openai_server.wrong_paths == ["POST /chat/completions"]


@pytest.mark.parametrize("choices", ["null", "missing"])
def test_a_usage_chunk_without_choices_is_read_for_its_usage(openai_server, choices):
    openai_server.behave(usage_choices=choices)
    openai_server.reply(ANSWER, usage=(42, 11))

    reply = streaming_llm(openai_server, []).chat(QUESTION, TOOLS)

    assert (reply.text, reply.usage) == (ANSWER, Usage(42, 11))


# --- a connection that breaks ------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [0, 3], ids=["after-the-headers", "mid-stream"])
@streamed_or_whole
def test_a_connection_dropped_while_the_reply_comes_in_is_asked_again(
    openai_server, chunks, streamed
):
    openai_server.reply(ANSWER, drop_after=chunks)
    openai_server.reply(ANSWER)

    reply = either_llm(openai_server, streamed).chat(QUESTION, TOOLS)

    assert reply.text == ANSWER
    [retried] = reply.retried
    assert retried.startswith(
        f"The connection to the model server at {openai_server.base_url} broke while its reply "
        "came in: "
    )
    assert len(openai_server.requests) == 2


def test_a_connection_dropped_on_every_attempt_fails_saying_it_broke(openai_server):
    openai_server.reply(ANSWER, drop_after=3, times=2)

    with pytest.raises(LLMError, match="broke while its reply came in, on each of 2 attempts"):
        streaming_llm(openai_server, [], max_retries=1).chat(QUESTION, TOOLS)


@pytest.mark.parametrize(("timeout", "said"), [(1, "1 second."), (0.5, "0.5 seconds.")])
def test_a_timeout_says_how_long_it_waited(openai_server, timeout, said):
    openai_server.reply("too late", delay=30)

    with pytest.raises(LLMError) as raised:
        make_llm(openai_server, timeout=timeout, max_retries=0).chat(QUESTION, TOOLS)

    assert str(raised.value) == (
        f"The model server at {openai_server.base_url} did not answer within {said}"
    )


# --- reading a stream's events -----------------------------------------------------------------


def test_a_streams_events_are_read_past_comments_names_and_blank_lines():
    lines = [
        ": OPENROUTER PROCESSING",  # a keep-alive comment
        "",
        "event: message",
        'data: {"a": 1}',
        "",
        "id: 7",
        'data: {"b":',  # one event's data over two lines
        "data: 2}",
        "",
        "data: [DONE]",  # no blank line after the last event
    ]

    assert list(sse_data(lines)) == ['{"a": 1}', '{"b":\n2}', "[DONE]"]


class Lines:
    """A response's lines, as the client reads a stream from httpx2."""

    def __init__(self, *lines: str) -> None:
        self.lines = lines

    def iter_lines(self):
        return iter(self.lines)


def test_an_error_event_mid_stream_ends_the_turn_saying_so(openai_server):
    llm = make_llm(openai_server)
    events = llm._events(Lines('data: {"choices": []}', "", 'data: {"error": {"message": "OOM"}}'))

    assert next(events) == {"choices": []}
    with pytest.raises(LLMError, match=r"^The model server's stream ended with an error: OOM$"):
        next(events)


def test_a_stream_that_is_not_json_is_an_llm_error(openai_server):
    events = make_llm(openai_server)._events(Lines("data: <html>", ""))

    with pytest.raises(LLMError, match="sent a stream that is not JSON: '<html>'"):
        next(events)


@streamed_or_whole
def test_a_web_page_where_the_server_should_be_asks_about_the_base_url(openai_server, streamed):
    openai_server.fail(200, body="<html>Open WebUI</html>", times=3)

    with pytest.raises(LLMError) as raised:
        either_llm(openai_server, streamed).chat(QUESTION, TOOLS)

    assert str(raised.value) == (
        f"The model server at {openai_server.base_url} answered with text/plain, not a chat "
        "completion: '<html>Open WebUI</html>'. Is its base URL right? An OpenAI-compatible one "
        "usually ends in /v1."
    )
    assert len(openai_server.requests) == 1  # not a fault to sit out


def test_a_stream_that_sends_no_usage_gives_a_reply_without_usage(openai_server):
    openai_server.behave(rejects_stream_options=True)  # and sends no usage unasked

    openai_server.reply(ANSWER, usage=(42, 11))
    reply = streaming_llm(openai_server, []).chat(QUESTION, TOOLS)

    assert (reply.text, reply.usage) == (ANSWER, Usage())


def test_tool_call_arguments_sent_as_an_object_are_taken_as_json_text(openai_server):
    call = {"id": "call_a", "type": "function", "function": {"name": "read_file"}}
    whole = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {**call, "function": {**call["function"], "arguments": {"path": "a.txt"}}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    openai_server.fail(200, body=whole)

    reply = make_llm(openai_server).chat(QUESTION, TOOLS)

    assert reply.tool_calls == (ToolCall("call_a", "read_file", '{"path": "a.txt"}'),)


def test_streamed_tool_call_arguments_sent_as_an_object_are_taken_as_json_text():
    pieces = ReplyPieces(None)
    call = {"index": 0, "id": "call_a", "function": {"name": "read_file", "arguments": {"a": 1}}}
    for chunk in (
        {"choices": [{"delta": {"tool_calls": [call]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ):
        pieces.take(chunk)

    assert pieces.reply().tool_calls == (ToolCall("call_a", "read_file", '{"a": 1}'),)


@pytest.mark.parametrize("where", ["reasoning_content", "think"])
def test_a_server_that_does_not_stream_answers_a_streamed_turn_whole(openai_server, where):
    openai_server.behave(streams=False, reasoning=where, call_ids=False)
    openai_server.reply(ANSWER, reasoning=THOUGHT, tool_calls=CALLS, usage=(42, 11))
    heard: list[str] = []

    reply = streaming_llm(openai_server, heard).chat(QUESTION, TOOLS)

    assert (reply.text, reply.reasoning, reply.usage) == (ANSWER, THOUGHT, Usage(42, 11))
    assert called(reply) == CALLED
    assert len({call.id for call in reply.tool_calls}) == 2
    assert "".join(heard) == ANSWER  # shown at once, without the thinking
    assert len(openai_server.requests) == 1


class Body:
    """A response's whole body, as the client reads a reply that was not streamed."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def read(self) -> bytes:
        return self.body


def test_a_whole_reply_to_a_streamed_turn_that_is_not_json_is_an_llm_error(openai_server):
    with pytest.raises(LLMError, match="sent a reply that is not JSON"):
        make_llm(openai_server)._whole_chunk(Body(b"{not json"))


@streamed_or_whole
def test_a_connection_reset_before_any_answer_is_asked_again(openai_server, streamed):
    openai_server.reset_connection()
    openai_server.reply(ANSWER)

    reply = either_llm(openai_server, streamed).chat(QUESTION, TOOLS)

    assert reply.text == ANSWER
    [retried] = reply.retried
    assert retried.startswith(
        f"The connection to the model server at {openai_server.base_url} broke before its reply "
        "came in: "
    )
    assert len(openai_server.requests) == 2


# --- one transport: plain httpx2, no SDK -------------------------------------------------------


def test_an_error_that_is_not_json_is_shown_as_the_server_sent_it(openai_server):
    # A proxy's page in front of the server: what it says is shown (short, without the key),
    # as Groq's errors always were, not only its status.
    openai_server.raw([b"<html>502 Bad Gateway</html>"], status=502, content_type="text/html")

    with pytest.raises(LLMError) as raised:
        make_llm(openai_server, max_retries=0).chat(QUESTION, TOOLS)

    assert str(raised.value) == (
        f"The model server at {openai_server.base_url} answered 502: <html>502 Bad Gateway</html>"
    )
    assert raised.value.status == 502


def test_a_request_carries_only_what_loop_sends(openai_server):
    openai_server.reply("ok")

    make_llm(openai_server).chat(QUESTION, TOOLS)

    [request] = openai_server.requests
    assert not [name for name in request.headers if name.startswith(("x-stainless", "openai-"))]
    assert request.headers["user-agent"] == "Loop"
    assert request.headers["accept-encoding"] == "identity"
    assert request.body == {
        "messages": QUESTION,
        "model": MODEL,
        "tools": TOOLS,
        "tool_choice": "auto",
    }
