"""The model client attacked by a hostile or broken model server, or by whoever controls its
replies: replies too big to hold, hand-made event streams, error bodies that are huge or echo the
key, redirects to other hosts, a vendor SDK's environment variables, secrets in the base URL,
malformed chunks, hostile tool-call ids and model lists. Each test fails if its defence goes.

What the server may do by design is answer anything a model could (it is the model); what it must
not do is hold the worker's memory, crash it, reach other hosts through it, or get the key (or
the URL's secrets) shown to the people using the site."""

import gzip
import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.llm.groq import GroqLLM
from agent.llm.openai_compat import OpenAICompatibleLLM, shown_url
from agent.llm.replies import MAX_LINE_BYTES, MAX_REPLY_CHARS, MAX_TOOL_CALLS
from agent.runs import start_run
from core.events import RunStatus
from core.llm import LLMError, Usage
from engine.execution import execute_run
from netguard.bounded import MAX_BODY_BYTES
from tests.chat_server import no_proxies
from tests.groq_server import FakeGroqServer
from tests.openai_server import (  # noqa: F401 (the fixture)
    MODEL,
    FakeOpenAIServer,
    openai_server_fixture,
    tool_call,
)
from tests.test_groq import QUESTION, TOOLS, corrected
from tests.test_openai import closed_port
from tests.test_openai_runs import on_server  # noqa: F401 (the fixture)

KEY = "sk-loop-operator-secret-0123456789abcdef"
TOO_LONG = f"more than {MAX_REPLY_CHARS:,} characters"
TOO_BIG = f"more than {MAX_BODY_BYTES // 2**20} MiB"


def make_llm(server, **options) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(MODEL, base_url=server.base_url, **options)


def streaming_llm(server, heard: list[str] | None = None, **options) -> OpenAICompatibleLLM:
    return make_llm(server, deltas=(heard if heard is not None else []).append, **options)


def event(data: object) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def content_chunk(text: str, finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish_reason}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


def finished() -> list[bytes]:
    return [event(content_chunk("", "stop")), b"data: [DONE]\n\n"]


def completion(message: dict, finish_reason: str = "stop") -> dict:
    choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice]}


# --- replies too big to hold ---------------------------------------------------------------------


def test_a_streamed_reply_longer_than_any_model_writes_is_not_read_to_its_end(openai_server):
    piece = "spam " * 2000  # 10,000 characters a chunk
    chunks = MAX_REPLY_CHARS // len(piece) + 50  # half a million characters past the limit
    openai_server.raw(
        [*(event(content_chunk(piece)) for _ in range(chunks)), *finished()],
    )

    with pytest.raises(LLMError, match=TOO_LONG):
        streaming_llm(openai_server).chat(QUESTION, TOOLS)


def test_reasoning_and_tool_calls_count_towards_the_reply_limit(openai_server):
    arguments = "a" * 10_000
    piece = {"index": 0, "function": {"arguments": arguments}}
    first = {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": ""}}
    chunks = [
        {"choices": [{"delta": {"reasoning_content": "r" * 10_000}}]},
        {"choices": [{"delta": {"tool_calls": [first]}}]},
        *(
            {"choices": [{"delta": {"tool_calls": [piece]}}]}
            for _ in range(MAX_REPLY_CHARS // 10_000)
        ),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    openai_server.raw([*(event(chunk) for chunk in chunks), b"data: [DONE]\n\n"])

    with pytest.raises(LLMError, match=TOO_LONG):
        streaming_llm(openai_server).chat(QUESTION, TOOLS)


def test_one_endless_line_is_not_held_in_memory(openai_server):
    # A comment is skipped whatever it says, but a reader that buffers whole lines holds it all.
    line = b": " + b"x" * (MAX_LINE_BYTES + 1024)
    pieces = [line[i : i + 65536] for i in range(0, len(line), 65536)]
    openai_server.raw([*pieces, b"\n\n", event(content_chunk("hi")), *finished()])

    with pytest.raises(LLMError, match="line of more than"):
        streaming_llm(openai_server).chat(QUESTION, TOOLS)


def test_a_whole_reply_bigger_than_the_body_limit_is_refused(openai_server):
    text = "x" * (MAX_BODY_BYTES + 1024)
    body = json.dumps(completion({"role": "assistant", "content": text})).encode()
    openai_server.raw([body], content_type="application/json")

    with pytest.raises(LLMError, match=TOO_BIG):
        make_llm(openai_server).chat(QUESTION, TOOLS)


def test_a_whole_reply_longer_than_any_model_writes_is_refused(openai_server):
    openai_server.reply("x" * (MAX_REPLY_CHARS + 1))

    with pytest.raises(LLMError, match=TOO_LONG):
        make_llm(openai_server).chat(QUESTION, TOOLS)


def test_a_compressed_body_is_not_inflated_past_the_limit(openai_server):
    bomb = gzip.compress(
        b" " * (MAX_BODY_BYTES * 2)
    )  # twice the limit in spaces, in some tens of KB
    openai_server.raw([bomb], content_type="application/json", headers={"Content-Encoding": "gzip"})

    with pytest.raises(LLMError, match="compressed reply"):
        make_llm(openai_server).chat(QUESTION, TOOLS)

    [request] = openai_server.requests
    assert request.headers["accept-encoding"] == "identity"


# --- what a server says, shown to the people using the site ---------------------------------------


@pytest.mark.parametrize("status", [400, 401, 500])
def test_a_huge_error_body_is_shortened_in_the_run_error(openai_server, status):
    openai_server.fail(status, "Bad things happened. " + "blah " * 1_000_000)

    with pytest.raises(LLMError) as failure:
        make_llm(openai_server, max_retries=0).chat(QUESTION, TOOLS)

    assert len(str(failure.value)) < 1500
    assert "Bad things happened." in str(failure.value)


def test_a_huge_error_event_in_a_stream_is_shortened(openai_server):
    error = {"error": {"message": "Provider fell over. " + "x" * 1_000_000}}
    openai_server.raw([event(content_chunk("Hel")), event(error)])

    with pytest.raises(LLMError, match="Provider fell over") as failure:
        streaming_llm(openai_server).chat(QUESTION, TOOLS)

    assert len(str(failure.value)) < 1500


def test_an_error_that_echoes_the_key_never_shows_it(openai_server):
    openai_server.fail(401, f"Incorrect API key provided: {KEY}. Check it.")

    with pytest.raises(LLMError, match="Incorrect API key provided") as failure:
        make_llm(openai_server, api_key=KEY).chat(QUESTION, TOOLS)

    assert KEY not in str(failure.value)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_debug_page_that_dumps_the_request_headers_never_shows_the_key(openai_server, streamed):
    page = f"<pre>Authorization: Bearer {KEY}\nHost: 127.0.0.1</pre>"
    openai_server.raw([page.encode()], content_type="text/html")
    llm = (
        streaming_llm(openai_server, api_key=KEY)
        if streamed
        else make_llm(openai_server, api_key=KEY)
    )

    with pytest.raises(LLMError, match="not a chat completion") as failure:
        llm.chat(QUESTION, TOOLS)

    assert KEY not in str(failure.value)


def test_a_stream_error_that_echoes_the_key_never_shows_it(openai_server):
    openai_server.raw([event({"error": {"message": f"bad key {KEY}"}})])

    with pytest.raises(LLMError, match="bad key") as failure:
        streaming_llm(openai_server, api_key=KEY).chat(QUESTION, TOOLS)

    assert KEY not in str(failure.value)


def test_terminal_escapes_in_an_error_are_not_passed_on(openai_server):
    # OSC 52 writes the operator's clipboard when `runagent` prints the error in a terminal.
    openai_server.fail(400, "Bad request\x1b]52;c;ZWNobyBvd25lZA==\x07 \x1b[2J done")

    with pytest.raises(LLMError, match="Bad request") as failure:
        make_llm(openai_server).chat(QUESTION, TOOLS)

    assert "\x1b" not in str(failure.value)
    assert "\x07" not in str(failure.value)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "nan"},
        {"retry-after": "inf"},
        {"retry-after": "1e308"},
        {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "99999999999999h"},
    ],
    ids=["nan", "inf", "huge", "huge-reset"],
)
def test_a_nonsense_retry_hint_is_an_llm_error_not_a_crash(openai_server, headers):
    openai_server.fail(429, "Slow down.", headers=headers)

    with pytest.raises(LLMError, match="rate limit"):
        make_llm(openai_server, max_retries=0).chat(QUESTION, TOOLS)


@pytest.mark.parametrize("headers", [{"retry-after": "-5"}, {"retry-after-ms": "-1e9"}])
def test_a_negative_retry_hint_is_not_waited_for(openai_server, headers):
    openai_server.fail(429, "Slow down.", headers=headers)
    openai_server.reply("ok")

    assert make_llm(openai_server).chat(QUESTION, TOOLS).text == "ok"


# --- the key and the URL's secrets ------------------------------------------------------------


@pytest.fixture
def other_host():
    with FakeOpenAIServer() as other:
        yield other


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_host_is_not_followed(openai_server, other_host, status):
    location = f"{other_host.base_url}/chat/completions"
    openai_server.fail(status, "Moved", headers={"Location": location})

    with pytest.raises(LLMError, match="redirect") as failure:
        make_llm(openai_server, api_key=KEY).chat(QUESTION, TOOLS)

    assert other_host.requests == []  # neither the conversation nor the key went there
    assert "LOOP_OPENAI_BASE_URL" in str(failure.value)


def test_a_redirect_within_the_servers_own_origin_is_followed(openai_server):
    openai_server.fail(307, "Moved", headers={"Location": "/v1/chat/completions"})
    openai_server.reply("ok")

    assert make_llm(openai_server, api_key=KEY).chat(QUESTION, TOOLS).text == "ok"
    assert [request.headers["authorization"] for request in openai_server.requests] == [
        f"Bearer {KEY}"
    ] * 2


def test_a_redirect_of_the_model_list_is_not_followed(openai_server, other_host):
    openai_server.fail(302, "Found", headers={"Location": f"{other_host.base_url}/models"})

    with pytest.raises(LLMError, match="redirect"):
        make_llm(openai_server, api_key=KEY).available_models()

    assert other_host.requests == []


def test_the_sdks_environment_never_reaches_the_model_server(openai_server, monkeypatch):
    # A developer's own OpenAI settings, in the shell that starts Loop.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developers-own-openai-key")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-developers-own")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_developers_own")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-developers-own")
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", "whsec_developers_own")
    headers = "X-Developers-Own: yes\nAuthorization: Bearer sk-developers-own"
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", headers)
    openai_server.reply("ok")

    make_llm(openai_server).chat(QUESTION, TOOLS)

    [request] = openai_server.requests
    sent = json.dumps(request.headers)
    assert "developers" not in sent
    assert "developers" not in json.dumps(request.body)
    assert "openai-organization" not in request.headers
    assert "openai-project" not in request.headers
    assert request.headers["authorization"] == "Bearer no-key"


def test_a_query_in_the_base_url_is_never_shown():
    url = f"http://127.0.0.1:{closed_port()}/v1?key=SECRET-IN-QUERY#frag"
    llm = OpenAICompatibleLLM(MODEL, base_url=url)

    with pytest.raises(LLMError) as failure:
        llm.chat(QUESTION, TOOLS)

    assert "SECRET-IN-QUERY" not in str(failure.value)
    assert "SECRET-IN-QUERY" not in shown_url(url)
    assert "SECRET" not in shown_url("http://user:SECRET@127.0.0.1:1/v1")


def test_a_password_in_the_base_url_is_not_echoed_back_by_an_error(openai_server):
    url = openai_server.base_url.replace("http://", "http://loop:SECRET-PASSWORD@")
    openai_server.fail(403, f"Denied for {url}")

    with pytest.raises(LLMError, match="Denied") as failure:
        OpenAICompatibleLLM(MODEL, base_url=url).chat(QUESTION, TOOLS)

    assert "SECRET-PASSWORD" not in str(failure.value)


# --- model output that abuses the reply's parts ------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_an_answer_that_opens_think_and_never_closes_it_is_still_an_answer(openai_server, streamed):
    openai_server.reply("<think>The sum of 1..100 is 5050, so the answer is 5050.")
    heard: list[str] = []
    llm = streaming_llm(openai_server, heard) if streamed else make_llm(openai_server)

    reply = llm.chat(QUESTION, TOOLS)

    assert "5050" in reply.text
    assert not reply.cut


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_hostile_tool_call_ids_are_replaced(openai_server, streamed):
    calls = [
        tool_call("read_file", {"path": "a.txt"}, id="dup"),
        tool_call("list_files", {}, id="dup"),
        tool_call("list_files", {}, id='x" onmouseover="alert(1)'),
        tool_call("list_files", {}, id="i" * 5000),
    ]
    openai_server.reply(tool_calls=calls)
    llm = streaming_llm(openai_server) if streamed else make_llm(openai_server)

    reply = llm.chat(QUESTION, TOOLS)

    ids = [call.id for call in reply.tool_calls]
    assert len(ids) == 4
    assert len(set(ids)) == 4
    assert ids[0] == "dup"  # a good id is kept as the server gave it
    assert all(len(id) <= 64 and " " not in id and '"' not in id for id in ids)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_reply_with_thousands_of_tool_calls_is_refused(openai_server, streamed):
    openai_server.reply(tool_calls=[tool_call("list_files", {}) for _ in range(5000)])
    llm = streaming_llm(openai_server) if streamed else make_llm(openai_server)

    with pytest.raises(LLMError, match=f"more than {MAX_TOOL_CALLS} tool calls"):
        llm.chat(QUESTION, TOOLS)


def test_a_streamed_answer_opening_with_endless_blank_pieces_costs_each_once():
    # Before its first non-blank character a reply could still open <think>, so it is held back;
    # holding it as one string scanned again on every piece took 6 s of CPU for 200,000 pieces,
    # growing as their square. Run in a child whose CPU time is capped far above the check's.
    code = (
        "from agent.llm.replies import ThinkingFilter\n"
        "thinking = ThinkingFilter()\n"
        "assert not any(thinking.feed(' ') for _ in range(1_000_000))\n"
        "assert thinking.feed('Hi') == ' ' * 1_000_000 + 'Hi'\n"
    )

    assert cpu_capped_child(code, seconds=30) == (0, "")


def test_an_answer_of_many_spaces_does_not_hold_the_worker():
    # Every answer is checked for a tool call written as text. A pattern that backtracks took
    # 33 s of CPU on 5,000 spaces (far more on more), holding the whole worker, past any
    # run's deadline. Run in a child whose CPU time is capped far above what the check takes.
    text = "```" + " " * 50_000 + "x"
    code = (
        "from core.llm import Reply\n"
        "from agent.llm.mistakes import text_tool_call\n"
        "from tests.test_groq import TOOLS\n"
        f"assert text_tool_call(Reply(text={text!r}), TOOLS) is None\n"
    )

    assert cpu_capped_child(code, seconds=60) == (0, "")


def cpu_capped_child(code: str, seconds: int) -> tuple[int, str]:
    """Runs `code` in a Python child that the kernel stops after `seconds` of CPU: its exit
    status and the end of its error output."""

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))

    child = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent.parent,
        preexec_fn=capped,
        capture_output=True,
        check=False,
    )
    return child.returncode, child.stderr.decode()[-500:]


# --- malformed chunks and bodies ----------------------------------------------------------------


MALFORMED_CHUNKS = {
    "choices-an-object": {"choices": {"delta": {"content": "hi"}}},
    "choice-a-string": {"choices": ["hi"]},
    "delta-a-string": {"choices": [{"delta": "hi"}]},
    "content-a-number": {"choices": [{"delta": {"content": 42}}]},
    "content-a-list": {"choices": [{"delta": {"content": ["hi"]}}]},
    "calls-an-object": {"choices": [{"delta": {"tool_calls": {"index": 0}}}]},
    "call-index-a-string": {
        "choices": [{"delta": {"tool_calls": [{"index": "0", "function": {"name": "x"}}]}}]
    },
    "call-index-a-list": {"choices": [{"delta": {"tool_calls": [{"index": [0]}]}}]},
    "call-name-a-number": {
        "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": 7}}]}}]
    },
    "finish-a-number": {"choices": [{"delta": {}, "finish_reason": 1}]},
    "usage-a-string": {"choices": [], "usage": "lots"},
}


@pytest.mark.parametrize("chunk", MALFORMED_CHUNKS.values(), ids=MALFORMED_CHUNKS.keys())
def test_a_malformed_chunk_fails_the_turn_with_an_llm_error(openai_server, chunk):
    openai_server.raw([event(content_chunk("Hi")), event(chunk), *finished()])

    with pytest.raises(LLMError, match="not a chat completion chunk"):
        streaming_llm(openai_server).chat(QUESTION, TOOLS)


MALFORMED_MESSAGES = {
    "content-a-number": {"role": "assistant", "content": 42},
    "calls-an-object": {"role": "assistant", "tool_calls": {"id": "x"}},
    "call-without-function": {"role": "assistant", "tool_calls": [{"id": "x"}]},
    "call-name-a-number": {
        "role": "assistant",
        "tool_calls": [{"id": "x", "function": {"name": 7, "arguments": "{}"}}],
    },
}


@pytest.mark.parametrize("message", MALFORMED_MESSAGES.values(), ids=MALFORMED_MESSAGES.keys())
def test_a_malformed_whole_reply_fails_the_turn_with_an_llm_error(openai_server, message):
    openai_server.raw([json.dumps(completion(message)).encode()], content_type="application/json")

    with pytest.raises(LLMError, match="not a chat completion"):
        make_llm(openai_server).chat(QUESTION, TOOLS)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_json_nested_past_pythons_stack_is_an_llm_error(openai_server, streamed):
    deep = b"[" * 100_000 + b"]" * 100_000
    if streamed:
        openai_server.raw([b"data: " + deep + b"\n\n"])
    else:
        openai_server.raw([deep], content_type="application/json")
    llm = streaming_llm(openai_server) if streamed else make_llm(openai_server)

    with pytest.raises(LLMError, match="not JSON"):
        llm.chat(QUESTION, TOOLS)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("counts", [("lots", 5), (-1_000_000, 5), (1e308, 5), (True, 5)], ids=str)
def test_token_counts_that_are_not_counts_are_not_believed(openai_server, streamed, counts):
    # A negative count would wind the run's token budget back; text would crash adding it up.
    openai_server.reply("ok", usage=counts)
    llm = streaming_llm(openai_server) if streamed else make_llm(openai_server)

    assert llm.chat(QUESTION, TOOLS).usage == Usage(0, 5)


UNSTORABLE = {"nul": ("A NUL \x00 here", "A NUL \ufffd here"), "lone": ("A \ud800", "A \ufffd")}


@pytest.mark.django_db
@pytest.mark.parametrize(("text", "stored"), UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_an_unstorable_answer_still_ends_the_run(on_server, alice, text, stored):  # noqa: F811
    on_server.reply(text, reasoning=text)

    run = execute_run(start_run(alice, "Say something odd"))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, stored)


def test_a_rejected_generation_fed_back_is_storable(monkeypatch):
    # Groq's tool_use_failed quotes what the model generated; the note feeding it back is kept in
    # the run's record (Reply.recovered_error).
    no_proxies(monkeypatch)
    with FakeGroqServer() as server:
        server.tool_use_failed('<function=read_file{"path": "\x00\ud800"}>')
        server.reply("ok")
        llm = GroqLLM("openai/gpt-oss-120b", api_key=KEY, base_url=server.base_url)

        reply = corrected(llm, QUESTION, TOOLS)

    reply.recovered_error.encode()  # no lone surrogate: psycopg encodes it
    assert "\x00" not in reply.recovered_error
    assert "\\u0000" not in json.dumps(server.requests[-1].messages)  # nor fed back


@pytest.mark.parametrize(
    "text", ["A NUL \x00 here", "A lone \ud800 surrogate"], ids=["nul", "lone"]
)
def test_an_error_postgresql_cannot_store_is_stored(openai_server, text):
    openai_server.fail(400, text)

    with pytest.raises(LLMError) as failure:
        make_llm(openai_server).chat(QUESTION, TOOLS)

    str(failure.value).encode()  # no lone surrogate: psycopg encodes it
    assert "\x00" not in str(failure.value)


# --- the hand-written event-stream reader ------------------------------------------------------


def test_the_event_stream_reader_takes_what_servers_send(openai_server):
    hello = json.dumps(content_chunk("Hel"))
    openai_server.raw(
        [
            "\ufeff".encode(),  # a byte order mark, which the standard says to skip
            f"data: {hello}\r\n\r\n".encode(),
            b": OPENROUTER PROCESSING\r\n\r\n",
            b"event: message\nid: 7\nretry: 100\n",
            b'data:{"choices": [{"index": 0,\n',  # no space, the data on two lines
            b'data: "delta": {"content": "lo"}}]}\n\n',
            b"data:\n\n",  # a keep-alive with empty data
            b"data: " + json.dumps(content_chunk(", wor")).encode()[:10],  # split across reads
            json.dumps(content_chunk(", wor")).encode()[10:] + b"\r",
            b"\n\r\n",
            event(content_chunk("ld", "stop")),
            b"data: [DONE]\n\n",
        ]
    )

    reply = streaming_llm(openai_server).chat(QUESTION, TOOLS)

    assert reply.text == "Hello, world"


# --- the model list ----------------------------------------------------------------------------


def test_a_model_list_with_malformed_or_hostile_entries_lists_the_good_ones(openai_server):
    models = [
        {"id": "good:1b"},
        {"object": "model"},
        {"id": 7},
        "bare",
        {"id": "\x1b]52;c;ZWNobyBvd25lZA==\x07"},  # writes the clipboard of modelcheck's terminal
        {"id": "m" * 10_000},
        {"id": "good:2b"},
    ]
    openai_server.raw(
        [json.dumps({"object": "list", "data": models}).encode()], content_type="application/json"
    )

    assert make_llm(openai_server).available_models() == ["good:1b", "good:2b"]


def test_a_model_list_bigger_than_the_body_limit_is_refused(openai_server):
    def models() -> Iterator[bytes]:
        yield b'{"object": "list", "data": ['
        entry = json.dumps({"id": "m" * 1000, "object": "model"}).encode() + b","
        for _ in range(MAX_BODY_BYTES // len(entry) + 10):
            yield entry
        yield b'{"id": "last"}]}'

    openai_server.raw(models(), content_type="application/json")

    with pytest.raises(LLMError, match=TOO_BIG):
        make_llm(openai_server).available_models()


def test_groq_is_bounded_too(monkeypatch):
    no_proxies(monkeypatch)
    with FakeGroqServer() as server:
        server.raw(
            [event(content_chunk("x" * 10_000)) for _ in range(MAX_REPLY_CHARS // 10_000 + 5)]
        )
        llm = GroqLLM(
            "openai/gpt-oss-120b", api_key=KEY, base_url=server.base_url, deltas=[].append
        )
        with pytest.raises(LLMError, match=TOO_LONG):
            llm.chat(QUESTION, TOOLS)
