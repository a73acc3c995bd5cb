"""GroqLLM when Groq's reply goes wrong on the way: a stream cut before its last chunk, a
connection dropped after the headers or mid-stream, a reply dripping in past the run's time, a
reply stopped at the output limit. The real groq client against the fake server, over a socket."""

import gc
import logging

import pytest

from core.llm import LLMError, ModelTimedOut, ToolCall
from tests.conftest import wait_for
from tests.groq_server import (  # noqa: F401 (the fixture)
    RETRY_NOTE,
    groq_server_fixture,
    tool_call,
)
from tests.test_groq import QUESTION, TOOLS, make_llm

ANSWER = "Paris is the capital of France, and has been for a very long time."
# The fake streams a role chunk, then the text in pieces of 8 characters.
FIRST_TWO_PIECES = ANSWER[:16]


def streaming_llm(server, heard: list[str], **options):
    llm = make_llm(server, max_retries=1, **options)
    llm.deltas = heard.append
    return llm


# --- a stream that ends before its last chunk -----------------------------------------------------


def test_a_stream_that_ends_before_its_last_chunk_is_asked_for_again(groq_server):
    groq_server.reply(ANSWER, cut_after=3)
    groq_server.reply(ANSWER)
    heard: list[str] = []

    reply = streaming_llm(groq_server, heard).chat(QUESTION, TOOLS, timeout=30)

    assert (reply.text, reply.cut) == (ANSWER, False)
    assert len(groq_server.requests) == 2
    assert reply.retried == ("Groq cut its reply short: the stream ended before its last chunk.",)
    # The page saw the cut text, then why more text follows it, then the whole reply.
    assert "".join(heard) == FIRST_TWO_PIECES + RETRY_NOTE + ANSWER


def test_a_stream_cut_on_every_attempt_fails_the_turn_saying_groq_cut_it(groq_server):
    groq_server.reply(ANSWER, cut_after=3, times=2)

    with pytest.raises(LLMError) as raised:
        streaming_llm(groq_server, []).chat(QUESTION, TOOLS, timeout=30)

    assert str(raised.value) == (
        "Groq cut its reply short: the stream ended before its last chunk, on each of 2 attempts."
    )
    assert len(groq_server.requests) == 2


def test_a_cut_stream_is_not_asked_for_again_when_the_wait_does_not_fit_the_time_left(groq_server):
    groq_server.reply(ANSWER, cut_after=3)
    llm = streaming_llm(groq_server, [])
    # The suite's garbage collected now, not in the 0.3 s the run has: a full collection of it
    # takes about that long on a busy machine, and would end the turn on its deadline instead.
    gc.collect()

    with pytest.raises(LLMError, match="cut its reply short") as raised:
        # The first backoff is 0.5 s, more than the run has left.
        llm.chat(QUESTION, TOOLS, timeout=0.3)

    assert not isinstance(raised.value, ModelTimedOut)
    assert len(groq_server.requests) == 1


def test_a_stream_that_brought_its_last_chunk_is_whole_without_done(groq_server):
    groq_server.reply("ok", cut_after=3)  # the role, "ok", the last chunk: all but [DONE]

    reply = streaming_llm(groq_server, []).chat(QUESTION, TOOLS, timeout=30)

    assert (reply.text, reply.retried) == ("ok", ())
    assert len(groq_server.requests) == 1


def test_a_tool_call_cut_mid_stream_is_never_returned_half_made(groq_server):
    # The role chunk, then the call's id, name and the first half of its arguments.
    groq_server.reply(
        tool_calls=[tool_call("read_file", {"path": "a.txt"}, id="call_a")], cut_after=2
    )
    groq_server.reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"}, id="call_b")])

    reply = streaming_llm(groq_server, []).chat(QUESTION, TOOLS, timeout=30)

    assert reply.tool_calls == (ToolCall("call_b", "read_file", '{"path": "notes.txt"}'),)


# --- a reply stopped at the output limit ----------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_reply_stopped_at_the_output_limit_is_returned_marked_cut(groq_server, streamed):
    groq_server.reply("Paris is the capital of", finish_reason="length")
    llm = streaming_llm(groq_server, []) if streamed else make_llm(groq_server)

    reply = llm.chat(QUESTION, TOOLS, timeout=30)

    assert (reply.text, reply.cut) == ("Paris is the capital of", True)
    assert len(groq_server.requests) == 1  # kept, not asked for again


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_reply_that_stopped_by_itself_is_not_marked_cut(groq_server, streamed):
    groq_server.reply(ANSWER)
    llm = streaming_llm(groq_server, []) if streamed else make_llm(groq_server)

    assert llm.chat(QUESTION, TOOLS, timeout=30).cut is False


# --- a connection dropped while the reply comes in ------------------------------------------------


@pytest.mark.parametrize("chunks", [0, 3], ids=["after-the-headers", "mid-stream"])
def test_a_connection_dropped_while_streaming_is_retried(groq_server, caplog, chunks):
    groq_server.reply(ANSWER, drop_after=chunks)
    groq_server.reply(ANSWER)
    heard: list[str] = []

    with caplog.at_level(logging.WARNING, logger="agent.llm.groq"):
        reply = streaming_llm(groq_server, heard).chat(QUESTION, TOOLS, timeout=30)

    assert reply.text == ANSWER
    assert len(groq_server.requests) == 2
    [why] = reply.retried
    assert why.startswith("The connection to Groq broke while its reply came in: ")
    [logged] = [record.getMessage() for record in caplog.records]
    assert logged == f"Groq: attempt 1 failed, retrying: {why}"
    shown_before = FIRST_TWO_PIECES + RETRY_NOTE if chunks else ""
    assert "".join(heard) == shown_before + ANSWER


def test_a_connection_dropped_on_every_attempt_fails_the_turn(groq_server):
    groq_server.reply(ANSWER, drop_after=3, times=2)

    with pytest.raises(LLMError) as raised:
        streaming_llm(groq_server, []).chat(QUESTION, TOOLS, timeout=30)

    assert str(raised.value).startswith(
        "The connection to Groq broke while its reply came in, on each of 2 attempts: "
    )

    assert len(groq_server.requests) == 2


def test_a_connection_dropped_after_the_headers_of_a_whole_reply_is_retried(groq_server):
    groq_server.reply(ANSWER, drop_after=0)
    groq_server.reply(ANSWER)

    reply = make_llm(groq_server, max_retries=1).chat(QUESTION, TOOLS, timeout=30)

    assert reply.text == ANSWER
    assert len(groq_server.requests) == 2


def test_a_stream_that_stalls_longer_than_the_timeout_is_retried(groq_server):
    groq_server.reply(ANSWER, drip=5)  # the second chunk would come 5 s after the first
    groq_server.reply(ANSWER)

    reply = streaming_llm(groq_server, [], timeout=0.3).chat(QUESTION, TOOLS)

    assert reply.text == ANSWER
    assert reply.retried == ("Groq did not answer within 0.3 seconds.",)


# --- a reply that drips in past the time the run has left -----------------------------------------


def test_a_reply_dripping_in_is_cut_off_when_the_run_has_no_time_left(groq_server):
    groq_server.reply("word " * 200, drip=0.1)  # 126 chunks: over 12 s, a chunk at a time
    heard: list[str] = []

    with pytest.raises(ModelTimedOut) as raised:
        streaming_llm(groq_server, heard).chat(QUESTION, TOOLS, timeout=1)

    assert str(raised.value) == (
        "Groq did not finish its reply within the 1.0 seconds the run had left."
    )
    assert heard  # the reply was coming in, a chunk at a time
    [sent] = wait_for(lambda: groq_server.streams, "the server to stop dripping")
    assert sent.client_left
    assert sent.chunks < sent.of
    assert len(groq_server.requests) == 1  # the time is up: no retry
