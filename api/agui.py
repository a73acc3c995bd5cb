"""A run's events as AG-UI 1.0 events (the `ag-ui-protocol` package's own models), for a
CopilotKit-style front end: a pure mapping, fed what api/follow.py yields, holding only what a
stream must remember to obey the protocol (the message open, the calls announced, whether a run
segment is open).

Each model turn's text is one assistant message (id `run-R-step-S`): its streamed pieces as
TEXT_MESSAGE_CONTENT while it is written; the stored reply, when it arrives, adds only what the
pieces did not send (nothing if they sent it all), and a reply read from the log alone is sent
whole. Each call the model makes is TOOL_CALL_START/ARGS/END under its message, then
TOOL_CALL_RESULT when it has run. A run waiting for its person's decision finishes its segment
with RUN_FINISHED and an interrupt outcome (one Interrupt per waiting call, its id the call's id):
AG-UI's own way to say "answer these, then resume", which CopilotKit understands, where a CUSTOM
event would need a client of Loop's own. Once decided, the run goes on in the same stream as a
new segment (RUN_STARTED again). A run that succeeded ends with RUN_FINISHED (its answer as the
result); one stopped, with RUN_FINISHED's cancelled outcome; one failed, halted or interrupted,
with RUN_ERROR (its status as the code)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from agent.selectors import Logged
from api.follow import Delta, Ended, Followed, Quiet
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunResumed,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)

INTERRUPT_REASON = "tool_approval"


@dataclass(frozen=True)
class Waiting:
    """A call the run waits on, as its interrupt tells it (`deadline`: when it expires)."""

    call_id: str
    tool: str
    arguments: str
    digest: str
    deadline: datetime | None


@dataclass
class Message:
    """The assistant message of one model turn, open while its pieces stream."""

    step: int
    id: str
    sent: str = ""


@dataclass
class AguiRun:
    """One stream's AG-UI view of run `run_id` of conversation `thread_id`; `decide_at` is the
    address (relative to the API) a waiting call is decided at, with `{call_id}` in it."""

    thread_id: str
    run_id: str
    decide_at: str = ""
    open: bool = False  # a RUN_STARTED not yet finished
    message: Message | None = None
    replied: int = 0  # the last step whose stored reply was sent
    announced: set[str] = field(default_factory=set)  # calls whose START/ARGS/END were sent
    asked: dict[str, ApprovalRequested] = field(default_factory=dict)  # waiting, not yet told

    def started(self) -> list[BaseEvent]:
        """RUN_STARTED, if no segment is open."""
        if self.open:
            return []
        self.open = True
        return [
            RunStartedEvent(
                thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION
            )
        ]

    def take(self, followed: Followed) -> list[BaseEvent]:
        """The AG-UI events for one thing followed (none for a Quiet: the stream keeps alive)."""
        match followed:
            case Delta():
                return self.piece(followed)
            case Logged():
                return self.logged(followed)
            case Ended(status=status):
                return self.ended(status)
            case Quiet():
                return []
        return []

    def piece(self, delta: Delta) -> list[BaseEvent]:
        """A piece of a reply being written: content of its message, when it follows what was
        sent of it (a stream that joined mid-reply waits for the stored reply instead)."""
        if delta.step <= self.replied:
            return []
        events: list[BaseEvent] = []
        message = self.message
        if message is None or message.step != delta.step:
            if delta.at not in (None, 0):
                return []
            events += self.closed()
            events += self.started()
            message = self.opened(delta.step)
            events.append(TextMessageStartEvent(message_id=message.id, role="assistant"))
        elif delta.at not in (None, len(message.sent)):
            return events
        message.sent += delta.text
        events.append(TextMessageContentEvent(message_id=message.id, delta=delta.text))
        return events

    def opened(self, step: int) -> Message:
        self.message = Message(step, f"run-{self.run_id}-step-{step}")
        return self.message

    def closed(self) -> list[BaseEvent]:
        """TEXT_MESSAGE_END of the message open, if one is."""
        if self.message is None:
            return []
        message, self.message = self.message, None
        return [TextMessageEndEvent(message_id=message.id)]

    def logged(self, logged: Logged) -> list[BaseEvent]:
        match logged.event:
            case ModelReplied():
                return self.replied_with(logged.event)
            case PersonSaid():
                return self.said(logged.seq, logged.event.text)
            case ToolCallStarted(call_id=call_id, tool=tool, arguments=arguments):
                return [*self.started(), *self.call(call_id, tool, arguments, step=None)]
            case ApprovalRequested():
                self.asked[logged.event.call_id] = logged.event
                return [*self.started(), *self.call_of(logged.event)]
            case ApprovalDecided(call_id=call_id):
                self.asked.pop(call_id, None)
                return self.started()
            case RunResumed():
                return self.started()
            case ToolCallFinished():
                return self.result(logged.event)
            case RunFinished():
                return self.finished(logged.event)
        return []

    def replied_with(self, reply: ModelReplied) -> list[BaseEvent]:
        """The stored reply: what its streamed pieces did not send of its text, then its calls."""
        events = self.started()
        message = self.message
        if message is not None and message.step != reply.step:
            events += self.closed()
            message = None
        self.replied = max(self.replied, reply.step)
        if reply.text:
            if message is None:
                message = self.opened(reply.step)
                events.append(TextMessageStartEvent(message_id=message.id, role="assistant"))
            rest = unsent(reply.text, message.sent)
            if rest:
                events.append(TextMessageContentEvent(message_id=message.id, delta=rest))
        parent = message.id if message is not None else None
        events += self.closed()
        for call in reply.tool_calls:
            events += self.call(call.id, call.name, call.arguments, step=parent)
        return events

    def call(self, call_id: str, tool: str, arguments: str, *, step: str | None) -> list[BaseEvent]:
        """TOOL_CALL_START/ARGS/END of a call, once."""
        if call_id in self.announced:
            return []
        self.announced.add(call_id)
        return [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=tool, parent_message_id=step),
            ToolCallArgsEvent(tool_call_id=call_id, delta=arguments),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def call_of(self, asked: ApprovalRequested) -> list[BaseEvent]:
        step = f"run-{self.run_id}-step-{asked.step}"
        return self.call(asked.call_id, asked.tool, asked.arguments, step=step)

    def said(self, seq: int, text: str) -> list[BaseEvent]:
        """What the person sent the run while it worked: a user message of its own."""
        message_id = f"run-{self.run_id}-said-{seq}"
        return [
            *self.started(),
            *self.closed(),
            TextMessageStartEvent(message_id=message_id, role="user"),
            TextMessageContentEvent(message_id=message_id, delta=text),
            TextMessageEndEvent(message_id=message_id),
        ]

    def result(self, finished: ToolCallFinished) -> list[BaseEvent]:
        events = [*self.started(), *self.closed()]
        events += self.call(finished.call_id, finished.tool, finished.arguments, step=None)
        events.append(
            ToolCallResultEvent(
                message_id=f"{finished.call_id}-result",
                tool_call_id=finished.call_id,
                content=finished.text,
                role="tool",
            )
        )
        return events

    def interrupted(self, waiting: list[Waiting]) -> list[BaseEvent]:
        """RUN_FINISHED with an interrupt for each call the run waits on (those its log asked
        about: the stream calls this once every waiting call was read)."""
        if not waiting:
            return []
        events = [*self.started(), *self.closed()]
        self.open = False
        self.asked.clear()
        interrupts = [self.interrupt(call) for call in waiting]
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        events.append(
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)
        )
        return events

    def interrupt(self, call: Waiting) -> Interrupt:
        deadline = call.deadline.isoformat() if call.deadline else None
        decide = self.decide_at.format(call_id=call.call_id)
        payload: dict[str, Any] = {
            "tool": call.tool,
            "arguments": call.arguments,
            "digest": call.digest,
            "deadline": deadline,
            "decide": {
                "method": "POST",
                "path": decide,
                "body": {"decision": "approve | edit | deny", "digest": call.digest},
                "resume": "or POST /api/v1/agui with resume: [{interruptId, status: "
                "resolved, payload: {decision: approve | deny}}]",
            },
        }
        return Interrupt(
            id=call.call_id,
            reason=INTERRUPT_REASON,
            message=f"Loop waits for your decision before it calls {call.tool}.",
            tool_call_id=call.call_id,
            expires_at=deadline,
            metadata={"loop": payload},
        )

    def finished(self, end: RunFinished) -> list[BaseEvent]:
        events = [*self.started(), *self.closed()]
        self.open = False
        match end.status:
            case RunStatus.SUCCEEDED:
                result = {"answer": end.answer, "status": end.status.value}
                events.append(
                    RunFinishedEvent(
                        thread_id=self.thread_id,
                        run_id=self.run_id,
                        result=result,
                        outcome=RunFinishedSuccessOutcome(),
                    )
                )
            case RunStatus.CANCELLED:
                events.append(
                    RunFinishedEvent(
                        thread_id=self.thread_id,
                        run_id=self.run_id,
                        result={"answer": end.answer, "status": end.status.value},
                        outcome=RunFinishedCancelledOutcome(),
                    )
                )
            case _:
                said = end.error or end.detail or f"The run ended {end.status.value}."
                events.append(RunErrorEvent(message=said, code=end.status.value))
        return events

    def ended(self, status: str) -> list[BaseEvent]:
        """The follower's end: a run whose end the log did not say (gone, or ended without
        its RunFinished) still closes its segment."""
        if not self.open:
            return []
        events = self.closed()
        self.open = False
        if status == RunStatus.SUCCEEDED:
            events.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id))
        elif status == RunStatus.CANCELLED:
            outcome = RunFinishedCancelledOutcome()
            events.append(
                RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)
            )
        else:
            message = f"The run ended {status}." if status else "The run is gone."
            events.append(RunErrorEvent(message=message, code=status or "not_found"))
        return events


def unsent(text: str, sent: str) -> str:
    """What of a stored reply's text its streamed pieces did not send: the rest when they sent
    its start, nothing when they sent it all (or something else: text sent cannot be taken
    back)."""
    return text[len(sent) :] if text.startswith(sent) else ""
