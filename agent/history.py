"""The message history as the model sees it, and how to rebuild it from a run's event log.

Every message the loop sends is derived from an event it reported first, so the history of any run
can be recovered, step by step, from its appended events alone (and a run can later resume).
"""

import re
from collections.abc import Iterable

from agent.events import Event, ModelReplied, RunHalted, RunStarted, ToolCallFinished
from agent.llm.base import Message, ToolCall

# Runs of angle brackets: removing them all (not just "<<<") leaves nothing that can join up into
# a delimiter again.
_DELIMITER_LIKE = re.compile(r"[<>]{2,}")


def undelimited(text: str) -> str:
    """Text that cannot open or close a <<<delimited>>> section it is quoted in."""
    return _DELIMITER_LIKE.sub("", text)


def tool_message(call_id: str, status: str, text: str) -> Message:
    """A tool result as the model reads it: the text, or the failure marked by its status."""
    content = (text or "(no output)") if status == "ok" else f"{status.upper()}: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def assistant_message(text: str, tool_calls: Iterable[ToolCall]) -> Message:
    message: Message = {"role": "assistant", "content": text or None}
    parts = [call.as_message_part() for call in tool_calls]
    if parts:
        message["tool_calls"] = parts
    return message


def summary_request(prompt: str) -> Message:
    return {"role": "user", "content": prompt}


def messages_from_events(events: Iterable[Event]) -> list[Message]:
    messages: list[Message] = []
    for event in events:
        match event:
            case RunStarted():
                messages.extend(event.messages)
            case ModelReplied():
                calls = [ToolCall(**call) for call in event.tool_calls]
                messages.append(assistant_message(event.text, calls))
            case ToolCallFinished():
                messages.append(tool_message(event.call_id, event.status, event.text))
            case RunHalted() if event.summary_prompt:
                messages.append(summary_request(event.summary_prompt))
    return messages
