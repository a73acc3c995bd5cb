"""The model's mistakes as a family: the client reports a reply the model got wrong as a typed
ModelMistake and asks nothing more; the loop feeds its note back, once per kind in a turn, and the
run's log records it (core.loop.ask_correcting)."""

import pytest

from agent.llm.groq import GroqLLM
from agent.llm.mistakes import TEXT_TOOL_CALL_NOTE
from agent.llm.openai_compat import OpenAICompatibleLLM
from agent.llm.scripted import ScriptedLLM, answer, call
from core.events import ModelReplied, RunFinished, RunStatus
from core.llm import LLMError, RejectedGeneration, ToolCallAsText
from core.loop import ask_correcting, run_agent
from tests.groq_server import groq_server_fixture  # noqa: F401 (the fixture)
from tests.openai_server import MODEL, openai_server_fixture  # noqa: F401 (the fixture)
from tests.test_groq import QUESTION, TOOLS
from tests.test_loop import bound

REJECTED = {"role": "user", "content": "[Loop] Your last reply was rejected: call a tool."}
AS_TEXT = {"role": "user", "content": "[Loop] Your last reply wrote a call as text."}


def rejected(again: str = "Groq answered 400 again") -> RejectedGeneration:
    return RejectedGeneration("Groq answered 400", note=REJECTED, again=again, status=400)


def as_text(again: str = "wrote it as text twice") -> ToolCallAsText:
    return ToolCallAsText("wrote it as text", note=AS_TEXT, again=again, retried=("a 503",))


# --- the client reports ---------------------------------------------------------------------


def test_the_client_reports_a_tool_call_written_as_text_and_asks_nothing_more(openai_server):
    openai_server.reply('{"name": "read_file", "arguments": {"path": "notes.txt"}}')
    llm = OpenAICompatibleLLM(MODEL, base_url=openai_server.base_url)

    with pytest.raises(ToolCallAsText) as raised:
        llm.chat(QUESTION, TOOLS)

    note = TEXT_TOOL_CALL_NOTE.format(name="read_file")
    assert raised.value.note == {"role": "user", "content": note}
    assert "twice" in raised.value.again
    assert len(openai_server.requests) == 1


def test_the_client_reports_a_rejected_generation_and_asks_nothing_more(groq_server):
    groq_server.tool_use_failed("<function=read_file>{bad</function>")
    llm = GroqLLM("openai/gpt-oss-120b", api_key="gsk_test_key", base_url=groq_server.base_url)

    with pytest.raises(RejectedGeneration) as raised:
        llm.chat(QUESTION, TOOLS)

    assert raised.value.status == 400
    assert str(raised.value).startswith("Groq answered 400: Failed to call a function")
    assert raised.value.again == f"{raised.value} again, after the first was fed back"
    assert raised.value.note["content"].startswith("[Loop] Your last reply was rejected")
    assert "<function=read_file>{bad</function>" in raised.value.note["content"]
    assert len(groq_server.requests) == 1


# --- the loop feeds back --------------------------------------------------------------------


def run(replies):
    llm, events = ScriptedLLM(replies), []
    result = run_agent("the task", llm=llm, tools=bound(), sink=events.append)
    return llm, events, result


def test_each_kind_of_mistake_is_fed_back_once_in_a_turn():
    llm, events, result = run([rejected(), as_text(), answer("Done.")])

    assert (result.status, result.answer) == (RunStatus.SUCCEEDED, "Done.")
    history = llm.turns[0][0]
    # Each ask carries the note on the reply just dropped, after the history, and no other.
    assert [messages for messages, _ in llm.turns] == [
        history,
        [*history, REJECTED],
        [*history, AS_TEXT],
    ]
    [replied] = [event for event in events if isinstance(event, ModelReplied)]
    assert replied.recovered_error == f"{REJECTED['content']}\n\n{AS_TEXT['content']}"
    assert replied.retried == ["a 503"]


def test_a_note_fed_back_is_recorded_on_the_turn_and_not_kept_in_the_history():
    llm, events, result = run([as_text(), call("echo", {"text": "hi"}), answer("Echoed.")])

    assert result.status is RunStatus.SUCCEEDED
    first, second = (event for event in events if isinstance(event, ModelReplied))
    assert (first.recovered_error, second.recovered_error) == (AS_TEXT["content"], "")
    assert AS_TEXT not in llm.turns[2][0]
    assert AS_TEXT not in result.messages


def test_the_same_mistake_twice_in_a_turn_fails_the_run_with_what_it_says_then():
    llm, events, result = run([as_text(), as_text(again="the second time, after being told")])

    assert result.status is RunStatus.FAILED
    assert result.error == "Model failed: the second time, after being told"
    assert len(llm.turns) == 2
    assert isinstance(events[-1], RunFinished)


def test_a_mistake_the_turn_before_is_fed_back_again_in_the_next():
    llm, _, result = run([rejected(), call("echo", {"text": "hi"}), rejected(), answer("Done.")])

    assert (result.status, result.answer) == (RunStatus.SUCCEEDED, "Done.")
    assert llm.turns[3][0][-1] == REJECTED


def test_a_mistake_that_echoes_the_key_never_shows_it_the_second_time_either(groq_server):
    key = "gsk_secret_key_echoed_back"
    said = {"code": "tool_use_failed", "message": f"Tool call validation failed for {key}"}
    groq_server.fail(400, body={"error": said}, times=2)
    llm = GroqLLM("openai/gpt-oss-120b", api_key=key, base_url=groq_server.base_url)

    with pytest.raises(LLMError) as raised:
        ask_correcting(lambda messages: llm.chat(messages, TOOLS), QUESTION)

    assert str(raised.value).endswith("again, after the first was fed back")
    assert key not in str(raised.value)
    assert "[redacted]" in str(raised.value)
