"""The Django event sink: each event is appended to the run's log, then passed on.

Persist first, publish second, so an event anyone has seen is never lost; publishing only hands
messages to agent.bus's publisher, so a slow or absent transport never slows the run. Each event
costs a few single-row writes (an append and, for some events, the run's summary row or an audit
row): the history is never rewritten, so a step costs the same at step 200 as at step 2.
"""

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Max
from django.utils import timezone

from accounting.ledger import turn_charge
from accounting.models import Charge
from agent import bus, observers
from agent.connections import release_connection
from agent.models import (
    LIVE,
    AgentRun,
    Alongside,
    BreakerTrip,
    RunEvent,
    ToolExecution,
)
from core.ending import run_end
from core.events import (
    ApprovalRequested,
    BreakerTripped,
    EndCause,
    Event,
    EventSink,
    ModelReplied,
    RunFinished,
    RunStatus,
    ToolCallFinished,
)
from core.guards import RunReleased
from core.results import ToolStatus
from core.state import RunState, apply
from core.text import storable

logger = logging.getLogger(__name__)


# The run's summary row (iterations, tokens, heartbeat) is refreshed at most this often while it
# runs; the event log has every step, and the final event writes the final figures.
SUMMARY_INTERVAL = 5.0

# The row a call waiting for its person's decision adds (the approvals app's ApprovalRequest),
# made from (run id, its ApprovalRequested, that event's seq) and written in the event's
# statement. That app stands above this one: it hands its maker over as it starts
# (`approvals.apps`), so the recorder writes the row without importing it.
RequestRow = Callable[[int, ApprovalRequested, int], Alongside]
_request_rows: list[RequestRow] = []


def write_request_rows(rows: RequestRow) -> None:
    """From now on, each ApprovalRequested recorded adds the row `rows` makes (one maker)."""
    _request_rows[:] = [rows]


# Events held to be recorded with the one that follows them, in one statement and one commit.
# The loop records something at once after each of these (a model's reply is followed by its
# calls' start, the run's end or a halt), so holding one delays it by microseconds; a worker
# that dies in between loses the reply, which is asked again, as if it had died during the turn.
# The start of a tool call is never held: it is durable before the tool runs.
HELD = (ModelReplied,)


class RunLost(RunReleased):
    """This worker may no longer write to the run: another took it over (its attempt moved on),
    or the database stopped answering. The run is resumed from its log by whoever works it next.
    """


class RunRecorder:
    """Writes carry the run's `attempt` as this worker took it: once another worker takes the run
    (it was thought dead, say after a network partition), every write from this one is refused."""

    def __init__(
        self,
        run: AgentRun,
        then: EventSink | None = None,
        *,
        batched: bool = False,
        on_end: Callable[[AgentRun], object] | None = None,
        last_seq: int | None = None,
    ) -> None:
        """`batched`: hold a model's reply to record it with what follows it (HELD), as a
        worker does; whoever records a run's events one at a time (its end, a resume, a test)
        leaves it off. A batched recorder's owner calls `flush` when it lets the run go.
        `on_end` is done in the transaction that records the run's end (what follows it in its
        conversation: agent.runs.start_next_queued); should it fail, the end stands.
        `last_seq`: the seq of the log's last event, when the caller knows it (0: the log of a
        run its worker claimed afresh is empty); else it is read."""
        self.run = run
        self.on_end = on_end
        self.batched = batched
        self.attempt = run.attempt
        self.then = then
        if last_seq is None:
            last_seq = run.events.aggregate(last=Max("seq"))["last"] or 0
        self.seq = last_seq
        # What this recorder wrote, folded (core.state): the run's figures on its row. Folded
        # when they are read (`state`: a summary, at most every SUMMARY_INTERVAL; a streamed
        # piece's step; the end it records for a run), not at every write: the loop has folded
        # each event already, and a step's write need not wait for a second fold nobody reads.
        self.folded = RunState()
        self.unfolded: list[Event] = []  # written, not folded yet, in order
        # `stream` reads the state on the model call's thread, which may outlive the turn.
        self.folding = threading.Lock()
        # The first refresh comes SUMMARY_INTERVAL into the run, not at its first reply: a run
        # shorter than that has its figures written once, with its end.
        self.summarised = time.monotonic()
        self.finished = False
        self.announced = bus.transport().event_insert  # the transport's, chosen once
        self.held: list[Event] = []  # events not recorded yet: they go with the next one
        self.unannounced: list[Event] = []  # recorded, not yet told to the run's observers

    def __call__(self, event: Event) -> None:
        bus.finish_deltas(self.run.pk)  # a reply streamed so far is over: its text goes first
        # What a model, a tool or a server said may hold what PostgreSQL refuses (a NUL): made
        # storable once, here, for the log and every row and reader that comes of it.
        event = storable(event)
        self.held.append(event)
        if self.batched and isinstance(event, HELD):
            return
        self.flush()

    def flush(self) -> None:
        """Record the events held so far, together: one statement, one commit; then publish."""
        if not self.held:
            return
        events, self.held = self.held, []
        try:
            rows = self.record(events)
        except (OperationalError, InterfaceError) as error:
            self.seq -= len(events)
            raise RunLost(f"Run {self.run.pk}: the database stopped answering: {error}") from error
        self.finished = isinstance(events[-1], RunFinished)
        release_connection()  # not held across the model call or tool call that comes next
        self.announce(rows)
        for event in events:
            if self.then is not None:
                self.publish(event)

    def record(self, events: list[Event]) -> list[bus.EventRow]:
        """The events and their audit rows in one statement; the run's row, when it changes,
        in the same transaction. The events as stored: seq, kind, data."""
        first = self.seq + 1
        self.seq += len(events)
        with self.folding:
            self.unfolded += events
        writes = [write for event in events for write in self.writes_for(event)]
        audit = [
            row
            for seq, event in enumerate(events, start=first)
            for row in self.audit_rows(event, seq)
        ]
        rows = [
            (seq, event.kind, getattr(event, "step", 0), event.as_dict())
            for seq, event in enumerate(events, start=first)
        ]
        if writes:
            with transaction.atomic():
                self.append(rows, audit)
                for write in writes:
                    write()
        else:  # one statement needs no transaction of its own
            self.append(rows, audit)
        self.unannounced += events
        return [(seq, kind, data) for seq, kind, _, data in rows]

    @property
    def state(self) -> RunState:
        """What this recorder wrote, folded: the events written since it was last read are
        applied now, each once, in order."""
        with self.folding:
            unfolded, self.unfolded = self.unfolded, []
            for event in unfolded:
                self.folded = apply(self.folded, event)
            return self.folded

    def append(
        self, rows: list[tuple[int, str, int, dict[str, object]]], audit: list[Alongside]
    ) -> None:
        appended = RunEvent.objects.append_all(
            self.run.pk, rows, self.announced, attempt=self.attempt, alongside=audit
        )
        if not appended:
            raise RunLost(
                f"Run {self.run.pk} was taken over by another worker (this one held attempt "
                f"{self.attempt}); this one stops working it."
            )

    def stream(self, text: str) -> None:
        """A piece of the reply the model is writing now: published (gathered with the pieces
        around it), never stored; the stored reply replaces it."""
        bus.publish_delta(self.run.pk, self.state.step + 1, text)

    def announce(self, rows: list[bus.EventRow]) -> None:
        """Wake the pages watching this run (through Redis, with the events just stored; a
        NOTIFY went with the INSERT). Queued, never waited for: a page that misses it catches
        up from the log. Then the observers hear the events recorded since they last did."""
        bus.publish(self.run.pk, self.seq, rows)
        # And the run's observers, of every path that records (a step, a run parked for a
        # decision, the decision, an end without a worker), once it is committed.
        heard, self.unannounced = self.unannounced, []
        if heard:
            observers.observed(self.run, heard)

    def publish(self, event: Event) -> None:
        """A subscriber that fails (a closed pipe, a dead socket) stops hearing; the run goes on."""
        if self.then is None:
            return
        try:
            self.then(event)
        except OSError as error:  # the reader went away (a closed pipe or socket): no traceback
            logger.warning("Run %s: publishing stopped: %s", self.run.pk, error)
            self.then = None
        except Exception:
            logger.exception("Run %s: publishing %s failed; it stops", self.run.pk, event.kind)
            self.then = None

    def audit_rows(self, event: Event, seq: int) -> list[Alongside]:
        """The audit rows an event adds, written with it (`seq`: the event's in the log)."""
        match event:
            case ToolCallFinished():
                return [self.execution(event)]
            case BreakerTripped():
                return [self.trip(event)]
            case ApprovalRequested():
                return [rows(self.run.pk, event, seq) for rows in _request_rows]
            case ModelReplied():
                return [self.charge(event)]
        return []

    def charge(self, event: ModelReplied) -> Alongside:
        """The turn's entry in the ledger (accounting), priced now: recorded with the turn, so a
        turn recorded is charged once, and one a lost worker never recorded is not charged."""
        run = self.run
        values = turn_charge(
            user_id=run.user_id,
            run_id=run.pk,
            conversation_id=run.conversation_id,
            step=event.step,
            provider=run.provider,
            model=run.model,
            prompt_tokens=event.prompt_tokens,
            completion_tokens=event.completion_tokens,
            cached_tokens=event.cached_tokens,
            at=timezone.now(),
        )
        return Alongside(Charge, values)

    def writes_for(self, event: Event) -> list[Callable[[], object]]:
        """What an event changes besides the log and the audit rows: the run's summary row."""
        match event:
            case ModelReplied():
                if time.monotonic() - self.summarised < SUMMARY_INTERVAL:
                    return []
                state = self.state
                return [
                    partial(
                        self.update,
                        iterations=state.step,
                        prompt_tokens=state.usage.prompt_tokens,
                        completion_tokens=state.usage.completion_tokens,
                    )
                ]
            case RunFinished():
                return [partial(self.write_end, event), self.after_end]
        return []

    def after_end(self) -> None:
        if self.on_end is None:
            return
        try:
            with transaction.atomic():  # a savepoint: a failure here undoes only its own work
                self.on_end(self.run)
        except Exception:
            logger.exception("Run %s: what follows its end could not be done", self.run.pk)

    def write_end(self, end: RunFinished) -> None:
        """The one write of a run's end to its row, whoever ends it (the loop, Loop on its
        behalf, a Stop of a queued run): with the log's RunFinished, or, when that could not be
        recorded, alone. Only a run still live at this recorder's attempt is ended."""
        AgentRun.objects.filter(pk=self.run.pk, attempt=self.attempt, status__in=LIVE).update(
            status=end.status,
            halt_reason=end.halt_reason or "",
            cause=end.cause or "",
            answer=end.answer,
            error=end.error,
            iterations=end.iterations,
            tool_calls=end.tool_calls,
            prompt_tokens=end.prompt_tokens,
            completion_tokens=end.completion_tokens,
            finished_at=timezone.now(),
        )
        self.summarised = time.monotonic()

    def end(self, status: RunStatus, error: str, cause: EndCause | None = None) -> None:
        """Record the end of a run the loop could not finish itself, with its progress so far."""
        mine = AgentRun.objects.filter(
            pk=self.run.pk, status=RunStatus.RUNNING, attempt=self.attempt
        )
        if not mine.exists():
            return
        self(run_end(self.state, status, "", error=error, cause=cause))

    def update(self, **fields: object) -> None:
        AgentRun.objects.filter(pk=self.run.pk, attempt=self.attempt).update(**fields)
        self.summarised = time.monotonic()

    def trip(self, event: BreakerTripped) -> Alongside:
        return Alongside(
            BreakerTrip,
            {
                "run_id": self.run.pk,
                "step": event.step,
                "tool": event.tool,
                "reason": event.reason.value,
                "failures": event.failures,
            },
        )

    def execution(self, event: ToolCallFinished) -> Alongside:
        ok = event.status == ToolStatus.OK
        return Alongside(
            ToolExecution,
            {
                "run_id": self.run.pk,
                "step": event.step,
                "call_id": event.call_id,
                "tool": event.tool,
                "arguments": event.arguments,
                "status": event.status.value,
                "result": event.text if ok else "",
                "error": "" if ok else event.text,
                "truncated": event.truncated,
                "duration": event.duration,
                "policy": event.policy,
            },
        )
