"""A fake chat-completions server for bench/loop.py, doing as little per request as a server can.

    .venv/bin/python bench/_chat_server.py   # prints its port, serves until stdin closes

It answers every POST whose path ends in /chat/completions with one prebuilt reply, the same for
every request: a short answer and one tool call (`TEXT`, `CALL_NAME`, `CALL_ARGUMENTS`), as one
JSON body, or, when the request asks for `"stream"`, as the server-sent events OpenAI's API sends
(the role, the text a token or so a chunk, the call's id and name, its arguments in pieces, the
finish reason, the usage, [DONE]), framed in chunked transfer encoding. The reply is written in
one `sendall` and nothing in the request is parsed beyond its length, so the server's share of a
turn is small and the same for a client and for the bare exchange it is compared with. It runs in
a process of its own so that its work never holds the benchmark's GIL. Connections are kept
alive, as the clients' pools expect.

It is not tests/openai_server.py: benchmarks do not import the tests, and that one checks and
records every request, which a benchmark would be timing.
"""

import json
import re
import socket
import sys
import threading

MODEL = "bench-model"
TEXT = (
    "I'll compute the sum of the numbers from 1 to 100 with a short Python snippet, then save "
    "the result to a file so you can check it. The formula n(n+1)/2 already says 5050, but "
    "running the code confirms it."
)
CALL_ID = "call_bench0123456789abcdef01"
CALL_NAME = "run_code"
CALL_ARGUMENTS = json.dumps(
    {
        "code": (
            "total = sum(range(1, 101))\nprint(total)\n"
            "with open('sum.txt', 'w') as file:\n    file.write(str(total))\n"
        )
    }
)
USAGE = {"prompt_tokens": 1540, "completion_tokens": 96, "total_tokens": 1636}

# Roughly a token a piece: a word with the space before it, or a run of punctuation.
_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]+|\s+")


def pieces(text: str) -> list[str]:
    return _TOKEN.findall(text)


def completion() -> dict[str, object]:
    message = {
        "role": "assistant",
        "content": TEXT,
        "tool_calls": [
            {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": CALL_NAME, "arguments": CALL_ARGUMENTS},
            }
        ],
    }
    return {
        **_envelope("chat.completion"),
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        ],
        "usage": USAGE,
    }


def chunks() -> list[dict[str, object]]:
    """The streamed reply, chunk by chunk, as OpenAI's API streams a tool call."""
    deltas: list[dict[str, object]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in pieces(TEXT)]
    first = {"index": 0, "id": CALL_ID, "type": "function"}
    deltas.append({"tool_calls": [{**first, "function": {"name": CALL_NAME, "arguments": ""}}]})
    deltas += [
        {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        for piece in pieces(CALL_ARGUMENTS)
    ]
    sent = [_chunk(delta, None) for delta in deltas]
    sent.append(_chunk({}, "tool_calls"))
    sent.append({**_envelope("chat.completion.chunk"), "choices": [], "usage": USAGE})
    return sent


def _envelope(kind: str) -> dict[str, object]:
    return {"id": "chatcmpl-bench", "object": kind, "created": 1764547200, "model": MODEL}


def _chunk(delta: dict[str, object], finish_reason: str | None) -> dict[str, object]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**_envelope("chat.completion.chunk"), "choices": [choice]}


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events() -> list[bytes]:
    events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks()]
    return [*events, b"data: [DONE]\n\n"]


PLAIN = json.dumps(completion()).encode()
PLAIN_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(PLAIN), PLAIN)
)
STREAMED_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(_http_chunk(event) for event in _events())
    + b"0\r\n\r\n"
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
STREAM_ASKED = re.compile(rb'"stream"\s*:\s*true')


def serve_connection(connection: socket.socket) -> None:
    """Requests on one kept-alive connection, answered in order until the client closes it."""
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    with connection:
        while True:
            head, found, rest = buffer.partition(b"\r\n\r\n")
            if not found:
                data = connection.recv(65536)
                if not data:
                    return
                buffer += data
                continue
            length = _content_length(head)
            while len(rest) < length:
                data = connection.recv(65536)
                if not data:
                    return
                rest += data
            body, buffer = rest[:length], rest[length:]
            connection.sendall(_response(head, body))


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _response(head: bytes, body: bytes) -> bytes:
    path = head.split(b" ", 2)[1]
    if not path.endswith(b"/chat/completions"):
        return NOT_FOUND
    return STREAMED_RESPONSE if STREAM_ASKED.search(body) else PLAIN_RESPONSE


def main() -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    print(listener.getsockname()[1], flush=True)
    threading.Thread(target=_accept, args=(listener,), daemon=True).start()
    sys.stdin.read()  # the benchmark closes our stdin (or ends) when it is done


def _accept(listener: socket.socket) -> None:
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=serve_connection, args=(connection,), daemon=True).start()


if __name__ == "__main__":
    main()
