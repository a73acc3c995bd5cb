"""A model's mistakes the client reports, and a server's limits it names.

A tool call written as JSON text in the answer (`text_tool_call`) and a reply the provider rejected
(Groq's tool_use_failed) get a note the model can act on, carried by the ModelMistake the client
raises for the loop to feed back once; a server or model that cannot call tools
(`cannot_call_tools`) fails the run saying what to do.
"""

import json

from core.history import loop_note
from core.llm import Reply, ToolSpec

REJECTED_REPLY_NOTE = loop_note(
    "Your last reply was rejected by the model provider and nothing in it ran: {reason} {hint}"
)


TEXT_TOOL_CALL_NOTE = loop_note(
    "Your last reply wrote a call to the tool {name} as text in your answer, so nothing ran. "
    "To use a tool, call it through tool calling, not in the text; otherwise answer in plain text."
)


SERVER_FLAGS_HINT = (
    "the server is probably not parsing the model's tool calls: see docs/models.md for the "
    "flags tool calling needs (vLLM's --enable-auto-tool-choice --tool-call-parser, llama.cpp's "
    "--jinja), or pick a model trained for tool calling"
)


def tool_names(tools: list[ToolSpec]) -> str:
    return ", ".join(spec["function"]["name"] for spec in tools)


def _unwrapped(text: str, opening: str, closing: str, *, closed: bool) -> str | None:
    """`text` without the `opening` it starts with and the `closing` it ends with (which may be
    missing unless `closed`), stripped; None if it is not so wrapped. Plain string work: a
    regular expression for it backtracked without end on a reply of a few thousand spaces."""
    if not text.startswith(opening):
        return None
    inner = text[len(opening) :]
    if inner.endswith(closing):
        inner = inner[: -len(closing)]
    elif closed:
        return None
    return inner.strip()


def _unfenced(text: str) -> str:
    """The text in a ```json fence, or in <tool_call> tags (the closing one may be missing)."""
    if len(text) >= 6 and (fenced := _unwrapped(text, "```", "```", closed=True)) is not None:
        text = fenced.removeprefix("json").strip()
    tagged = _unwrapped(text, "<tool_call>", "</tool_call>", closed=False)
    return text if tagged is None else tagged


def text_tool_call(reply: Reply, tools: list[ToolSpec] | None) -> str | None:
    """The tool a reply with no tool calls wrote a call to as JSON text, or None: `{"name": ...,
    "arguments": {...}}` (or "parameters"), bare, in a ```json fence or in <tool_call> tags."""
    if reply.tool_calls or not tools:
        return None
    try:
        written = json.loads(_unfenced(reply.text.strip()))
    except (ValueError, RecursionError):
        return None
    if isinstance(written, dict) and isinstance(written.get("function"), dict):
        written = written["function"]
    if not isinstance(written, dict) or not ({"arguments", "parameters"} & written.keys()):
        return None
    name = written.get("name")
    offered = {spec["function"]["name"] for spec in tools}
    return name if isinstance(name, str) and name in offered else None


# How servers say a model (or the server as started) cannot take `tools`: Ollama, vLLM without
# --enable-auto-tool-choice, llama.cpp without --jinja, and the wording others use.
_NO_TOOLS = (
    "does not support tools",
    "doesn't support tools",
    "tools are not supported",
    "tools not supported",
    "tool use is not supported",
    "tool calling is not supported",
    "requires --enable-auto-tool-choice",
    "enable-auto-tool-choice",
    "tools param requires --jinja",
    "--jinja",
    "unsupported param: tools",
)


def cannot_call_tools(message: str) -> bool:
    return _mentions(message, _NO_TOOLS)


_MISSING = (
    "not found",
    "does not exist",
    "not exist",
    "no such model",
    "unknown model",
    "try pulling",
)


def says_missing(message: str) -> bool:
    return _mentions(message, _MISSING)


def _mentions(message: str, phrases: tuple[str, ...]) -> bool:
    lowered = message.lower()
    return any(phrase in lowered for phrase in phrases)
