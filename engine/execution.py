"""The worker's side of a run: claim it, pick it up where its log ends, wire its model, tools,
memory and recorder together, work it to its end, remember its outcome."""

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from enum import StrEnum
from functools import partial

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from accounting.quotas import turn_allowance
from agent.abandoned import ended_from_log
from agent.allowed import allowed_now
from agent.llm.factory import OPENAI, ModelChoice, llm_for
from agent.llm.gate import TakingTurns
from agent.models import FINISHED, AgentRun, RunResume
from agent.queued import messages_for
from agent.recorder import RunRecorder
from agent.runs import reopen, start_next_queued
from agent.selectors import conversation_context, instructions_for
from agent.toolset import registry_for
from approvals.policy import approval_for
from core.ending import Ended, Parked, Released
from core.events import (
    BREAKER_REASONS,
    ApprovalDecided,
    ApprovalRequested,
    ContinuedBy,
    EndCause,
    Event,
    HaltReason,
    ResumeReason,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStatus,
    event_from_dict,
)
from core.guards import RunReleased, failure_count, trip_detail
from core.history import counted_turns, loop_note
from core.interrupt import Interrupt, StopReason
from core.llm import LLM
from core.loop import Limits, Tools, run_agent
from core.recalled import RecalledMemory
from core.results import ToolStatus
from core.run import recall_nothing
from core.state import RunState, apply, replay
from memory.hygiene import carries_nothing, files_written, outcome_text, worth_an_outcome
from memory.store import recall, remember
from rights.effective import Rights
from sandbox.fence import raise_fence
from sandbox.host import SandboxHost
from tools.base import BoundTools, ToolContext
from tools.context import context_for
from tools.files import WRITE_FILE
from workspace.directory import workspace_path

# How often a run's watcher looks for a stop request (from procrastinate, or the database).
WATCH_INTERVAL = 0.1


# What the model reads when a person asks a run that had ended to go on.
CONTINUE_NOTE = loop_note(
    "The person asked you to go on from where you stopped, with the run's limits renewed. "
    "Carry on with the task; do not repeat the tool calls that already worked."
)


logger = logging.getLogger(__name__)


def continue_note(state: RunState | None) -> str:
    """The Continue's note to the model; after a breaker halt it also says which failure halted
    the run, so the model tries another way (the breaker halts the run at once if that failure
    comes again, core.guards.Breaker)."""
    ended = state.finished if state is not None else None
    trip = state.last_trip if state is not None else None
    if trip is None or ended is None or ended.halt_reason not in BREAKER_REASONS:
        return CONTINUE_NOTE
    count = failure_count(trip.failures)
    detail = trip_detail(HaltReason(trip.reason), trip.tool, count, trip.failures)
    return (
        f"{CONTINUE_NOTE} It had halted because {detail} Do not make that call again the same "
        "way: it halts the run at once. Try another way, or say what the person must change."
    )


class RunNotQueued(RuntimeError):
    pass


StopSource = Callable[[], StopReason | None]


def execute_run(
    run: AgentRun,
    *,
    on_event: Callable[..., None] | None = None,
    stop_requested: StopSource | None = None,
    llm: LLM | None = None,
    tools: Tools | None = None,
    sandbox: SandboxHost | None = None,
) -> AgentRun:
    """Work a queued run (new, or continued) to its end in this process, as a worker works its
    job; every event is recorded as it happens. A worker that had its job queued learns the run
    is taken, and leaves it. Its snippets run in `sandbox` (None: sandboxes of its own).

    It has no job for a Stop to abort: its watcher reads the Stop from the database, and from
    `stop_requested` (runagent's Ctrl-C)."""
    source = cancel_requested(run.pk)
    if stop_requested is not None:
        source = first_of(stop_requested, source)
    worked = take_and_work(
        run.pk,
        job_id=None,
        worker=process_name(),
        stop_requested=source,
        on_event=on_event,
        llm=llm,
        tools=tools,
        sandbox=sandbox,
    )
    if worked is None:
        run.refresh_from_db()
        raise RunNotQueued(f"Run {run.pk} is not queued; it is {run.status}.")
    return worked


def cancel_requested(run_id: int) -> StopSource:
    """The Stop of a run without a job: asked through the database (agent.runs.request_cancel)."""

    def read() -> StopReason | None:
        asked = AgentRun.objects.filter(pk=run_id, cancel_requested_at__isnull=False).exists()
        return StopReason.CANCEL if asked else None

    return read


def first_of(*sources: StopSource) -> StopSource:
    """A stop asked by any of `sources`, in their order."""

    def read() -> StopReason | None:
        return next((reason for source in sources if (reason := source()) is not None), None)

    return read


@contextmanager
def beating(run: AgentRun) -> Iterator[None]:
    """The run's own heartbeat while this process works it (it has no job, so no worker's
    heartbeat speaks for it): written every LOOP_STALE_SECONDS / 3 from a thread, whatever the
    run is doing. Once it is stale the process is gone, and the recovery, a Stop, a new run of
    the owner's and `runagent --resume` treat the run so (agent/abandoned.py)."""
    done = threading.Event()

    def beat() -> None:
        try:
            while not done.wait(settings.LOOP_STALE_SECONDS / 3):
                try:
                    AgentRun.objects.filter(pk=run.pk, attempt=run.attempt).update(
                        heartbeat_at=Now()
                    )
                except DatabaseError as error:  # the next beat tries again
                    logger.warning("Run %s: its heartbeat was not written: %s", run.pk, error)
        finally:
            connection.close()  # this thread's own

    beater = threading.Thread(target=beat, name=f"run-{run.pk}-heartbeat", daemon=True)
    beater.start()
    try:
        yield
    finally:
        done.set()
        beater.join(timeout=5)


class JobOutcome(StrEnum):
    """How a job ended when its run did not end in it."""

    NOTHING_TO_DO = "nothing to do"  # the run ended meanwhile, or it is another job's now
    # Its worker gave the run up unfinished (the worker is stopping, or another took the run
    # over): whoever takes the run next resumes it from its log.
    RELEASED = "released"
    # It waits for its person's decision on a call: no worker holds it until they decide.
    AWAITING_APPROVAL = "awaiting approval"


def work_job(
    run_id: int,
    *,
    job_id: int | None,
    worker: str,
    stop_requested: StopSource,
    sandbox: SandboxHost | None = None,
) -> RunStatus | JobOutcome:
    """A worker's job: take the run (new, continued, or left by a worker that stopped) and work
    it to its end. Says the status it ended with, or why it did not end here."""
    run = take_and_work(
        run_id, job_id=job_id, worker=worker, stop_requested=stop_requested, sandbox=sandbox
    )
    if run is None:
        return JobOutcome.NOTHING_TO_DO
    if run.status == RunStatus.AWAITING_APPROVAL:
        return JobOutcome.AWAITING_APPROVAL
    return RunStatus(run.status) if run.status in FINISHED else JobOutcome.RELEASED


def take_and_work(
    run_id: int,
    *,
    job_id: int | None,
    worker: str,
    stop_requested: StopSource,
    on_event: Callable[..., None] | None = None,
    llm: LLM | None = None,
    tools: Tools | None = None,
    sandbox: SandboxHost | None = None,
) -> AgentRun | None:
    """The one way a run is worked, by a worker's job or in a process of its own (`job_id`
    None): claim it, watch `stop_requested` for a Stop or a hand back, work it. None if there
    was nothing to take. A run without a job keeps its own heartbeat. Its snippets run in the
    worker's `sandbox`; without one, in sandboxes of its own, closed at its end."""
    claimed = claim(run_id, job_id=job_id, worker=worker)
    if claimed is None:
        return None
    interrupt = Interrupt()
    if claimed.stopped:  # its Stop went to a job or a worker it no longer has
        interrupt.set(StopReason.CANCEL)
    alive = beating(claimed.run) if job_id is None else nullcontext()
    with hosted(sandbox) as host, alive, watching(claimed.run, interrupt, stop_requested):
        return work(claimed, interrupt, on_event=on_event, llm=llm, tools=tools, sandbox=host)


@contextmanager
def hosted(sandbox: SandboxHost | None) -> Iterator[SandboxHost]:
    """`sandbox`, or a host of the run's own (an in-process runner that made none), closed
    once the run is over."""
    if sandbox is not None:
        yield sandbox
        return
    with SandboxHost() as own:
        yield own


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A run this worker took: why it resumes (None: it starts afresh), whom it took it from,
    and whether a Stop was recorded on it before it was taken (it then ends cancelled at once)."""

    run: AgentRun
    reason: ResumeReason | None
    lost_worker: str = ""
    by: ContinuedBy | None = None  # a continue's asker
    stopped: bool = False


def claim(run_id: int, *, job_id: int | None, worker: str) -> Claim | None:
    """Take the run for this worker: its attempt grows by one, which fences off whoever held it
    before. None if there is nothing to work:
    it ended meanwhile, or this job is no longer the run's (a newer one replaced it).

    The run's Stop is read here, with the row held: a Stop recorded before this claim was heard
    by none of the run's workers (its abort went to a dead worker's job, or to none while a
    decision queued the run), and one recorded after it aborts this job (agent.runs.record_stop).

    In this process (`job_id` None) only a queued run is taken; its job, if any, then finds the
    run is not its own any more.
    """
    with transaction.atomic():
        # Its owner with it (the run's tools, recall and memory act for them), not locked.
        taken = AgentRun.objects.select_for_update(of=("self",)).select_related("user")
        run = taken.filter(pk=run_id).first()
        if run is None or run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return None
        if job_id is not None and run.job_id != job_id:
            return None
        if job_id is None and run.status != RunStatus.QUEUED:
            return None
        reason = resume_reason(run)
        lost = (ResumeReason.WORKER_LOST, ResumeReason.DATABASE_RESTARTED)
        lost_worker = run.worker if reason in lost else ""
        if reason is ResumeReason.WORKER_LOST:
            run.resumes += 1
        run.attempt += 1
        run.status = RunStatus.RUNNING
        run.started_at = run.started_at or timezone.now()
        run.worker = worker
        run.job_id = job_id
        run.heartbeat_at = timezone.now()
        asker, run.continue_requested_by = run.continue_requested_by, None
        run.save(
            update_fields=[
                *("resumes", "attempt", "status", "started_at", "worker", "job_id"),
                *("heartbeat_at", "continue_requested_by"),
            ]
        )
        raise_fence(workspace_path(run.user_id), run.pk, run.attempt)  # its snippets' files too
        if reason is not None:
            resume = RunResume.objects.create(
                run=run,
                attempt=run.attempt,
                reason=reason,
                lost_worker=lost_worker,
                requested_by=asker if reason is ResumeReason.CONTINUED else None,
            )
    by = resume.by if reason is not None else None
    return Claim(run, reason, lost_worker, by, stopped=run.cancel_requested_at is not None)


def resume_reason(run: AgentRun) -> ResumeReason | None:
    """Why a run is being taken up again, read from how it was left; None for a fresh start.

    Still running: its worker died, or the database restarted under it (then its worker could
    not hand it back, and this is no fault of the run's: not counted against LOOP_MAX_RESUMES).
    Queued with a log: a person continued it (its log ends with its end), decided the calls it
    waited on (it ends with their decisions), or its worker handed it back mid-way.
    """
    if run.status == RunStatus.RUNNING:
        if database_started_after(attempt_began(run)):
            return ResumeReason.DATABASE_RESTARTED
        return ResumeReason.WORKER_LOST
    last = run.events.order_by("-seq").values_list("kind", flat=True).first()
    if last is None:
        return None
    if last == ApprovalDecided.kind:
        return ResumeReason.DECIDED
    return ResumeReason.CONTINUED if last == RunFinished.kind else ResumeReason.HANDED_BACK


def attempt_began(run: AgentRun) -> datetime:
    """When the run's current attempt was claimed: its latest resume, or its start."""
    resumed = run.resumes_log.order_by("-attempt").values_list("created_at", flat=True).first()
    return max(filter(None, (resumed, run.started_at)), default=run.created_at)


def database_started_after(moment: datetime) -> bool:
    """Whether the database server (re)started after `moment`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time() > %s", [moment])
        (started_after,) = cursor.fetchone() or (False,)
        return bool(started_after)


def work(
    claimed: Claim,
    interrupt: Interrupt | None = None,
    *,
    on_event: Callable[..., None] | None = None,
    llm: LLM | None = None,
    tools: Tools | None = None,
    sandbox: SandboxHost | None = None,
) -> AgentRun:
    """Work a claimed run from where its log ends, to its end or until this worker lets it go.
    Once `interrupt` is set the step under way is abandoned: the model call, a rate-limit wait,
    or the run's sandboxes, which are killed (None: nobody stops it but its end).

    Returns the run as it ended, or, let go unfinished (handed back, or its recorder fenced off),
    as this worker left it: not finished, and back in the queue if the database still answers."""
    run = claimed.run
    interrupt = interrupt or Interrupt()
    recorder = RunRecorder(
        run,
        then=on_event,
        batched=True,
        on_end=start_next_queued,
        last_seq=0 if claimed.reason is None else None,  # a fresh start's log is empty
    )
    try:
        rights = allowed_now(run)  # what it was allowed, under its person's rights as they are now
        check_model_still_allowed(run, rights)
        llm = llm or taking_turns(
            llm_for(ModelChoice(run.provider, run.model), deltas=recorder.stream)
        )
        tools = tools or tools_for(run, stopped=interrupt.is_set, sandbox=sandbox, rights=rights)
        known = tools.registry.tools if isinstance(tools, BoundTools) else None
        approval = approval_for(run, tool_context(run), known, rights)
        allowance = turn_allowance(run.user_id)
    except Exception as error:
        logger.exception("Run %s could not start", run.pk)
        recorder.end(
            RunStatus.FAILED, f"The run could not start: {error}", EndCause.COULD_NOT_START
        )
        run.refresh_from_db()
        return run
    if sandbox is not None:
        interrupt.on_set(partial(sandbox.kill_run, run.pk))
    try:
        resume, limits, worked = pick_up(claimed, recorder)
        if too_often_resumed(run) and not claimed.stopped:  # a Stop's end is `cancelled`
            given_up = resumed_too_often(claimed)
            recorder(ended_from_log(RunStatus.FAILED, resume, given_up, EndCause.TOO_MANY_RESUMES))
            run.refresh_from_db()
            return run
        result = run_agent(
            run.task,
            llm=llm,
            tools=tools,
            sink=recorder,
            limits=limits,
            recall=partial(recall_for, run.user) if rights.memory else recall_nothing,
            history=conversation_context(run),
            interrupt=interrupt,
            resume=resume,
            worked_seconds=worked,
            inbox=partial(messages_for, run.pk),
            approval=approval,
            instructions=instructions_for(run),
            allowance=allowance,
        )
    except RunReleased:  # its recorder was fenced off before the loop ran
        release(run, recorder)
        return run
    except (KeyboardInterrupt, SystemExit) as stop:  # the process is going away
        recorder.end(
            RunStatus.INTERRUPTED, f"The process running it stopped ({type(stop).__name__})."
        )
        raise
    match result:
        case Released():  # nothing more is recorded here: the run's next worker takes it up
            release(run, recorder)
            return run
        case Parked(awaiting=awaiting):
            park(run, recorder, awaiting)
            return run
    if not recorder.finished:  # the loop could not log its end: the run's row gets it anyway
        recorder.write_end(result.end)
    read_again(run)
    # An answer cut short is shown, never recalled as a fact; an assistant without memory's
    # outcomes are not remembered.
    if not result.answer_cut and rights.memory:
        remember_outcome(run, result)
    return run


def park(run: AgentRun, recorder: RunRecorder, requests: list[ApprovalRequested]) -> None:
    """The run waits for its person's decision on calls: their requests (with the reply its
    recorder held) are recorded, and the run leaves its worker, in one transaction, so a
    decision finds the run waiting as soon as its card can be seen. A worker that lost the run
    meanwhile records nothing: the run's next worker asks again."""
    events: list[Event] = [*recorder.held, *requests]
    recorder.held = []
    try:
        with transaction.atomic():
            parked = AgentRun.objects.filter(
                pk=run.pk, attempt=recorder.attempt, status=RunStatus.RUNNING
            ).update(status=RunStatus.AWAITING_APPROVAL, worker="", job_id=None)
            if not parked:
                return
            rows = recorder.record(events)
    except (RunReleased, DatabaseError) as lost:
        logger.info("Run %s: its wait for a decision was not recorded: %s", run.pk, lost)
        return
    recorder.announce(rows)
    if recorder.then is not None:
        for event in events:
            recorder.publish(event)
    read_again(run)


def read_again(run: AgentRun) -> None:
    """The run's row as it ended, its owner kept: refresh_from_db forgets the user loaded with
    the run, who cannot change, and what follows (its outcome remembered) would read them again."""
    owner = run.user
    run.refresh_from_db()
    run.user = owner


# One gate per process for the OpenAI-compatible server: at most LOOP_OPENAI_CONCURRENCY of this
# worker's runs ask it at once (0: no limit).
_SERVER_GATE: dict[int, threading.BoundedSemaphore] = {}
_SERVER_GATE_LOCK = threading.Lock()


def server_gate() -> threading.BoundedSemaphore | None:
    """This process's gate for the model server, sized by LOOP_OPENAI_CONCURRENCY (None: none)."""
    slots = settings.LOOP_OPENAI_CONCURRENCY
    if slots <= 0:
        return None
    with _SERVER_GATE_LOCK:
        return _SERVER_GATE.setdefault(slots, threading.BoundedSemaphore(slots))


def taking_turns(llm: LLM) -> LLM:
    """The run's client for an OpenAI-compatible server, waiting its turn at this process's gate
    when LOOP_OPENAI_CONCURRENCY is set; any other client as it is."""
    gate = server_gate() if llm.provider == OPENAI else None
    return llm if gate is None else TakingTurns(llm, gate)


def pick_up(claimed: Claim, recorder: RunRecorder) -> tuple[RunState | None, Limits, float]:
    """The state to go on from (None: start afresh), the limits from here on, and the seconds
    already worked. A resumed run's log says so first: a RunResumed event."""
    run, reason = claimed.run, claimed.reason
    limits = Limits(**run.limits)
    if reason is None:  # its log is empty (resume_reason): nothing to read
        return None, limits, 0.0
    rows = list(run.events.order_by("seq").values_list("kind", "data", "created_at"))
    events = [event_from_dict(kind, data) for kind, data, _ in rows]
    worked = worked_seconds([(kind, at) for kind, _, at in rows])
    state = replay(events) if any(isinstance(e, RunStarted) for e in events) else None
    note = ""
    if reason is ResumeReason.CONTINUED and state is not None:
        limits = renewed_limits(events, state, worked)
    if reason is ResumeReason.CONTINUED:  # one stopped before it started starts afresh
        note = continue_note(state)
        AgentRun.objects.filter(pk=run.pk).update(limits=dataclasses.asdict(limits))
    resumed = RunResumed(
        attempt=run.attempt,
        reason=reason,
        lost_worker=claimed.lost_worker,
        note=note,
        limits=dataclasses.asdict(limits),
        by=claimed.by,
    )
    recorder(resumed)
    if state is None:  # it stopped before its first event: it starts afresh
        return None, limits, worked
    return apply(state, resumed), limits, worked


def worked_seconds(rows: Sequence[tuple[str, datetime]]) -> float:
    """Time the run was being worked: from each start or resume to the last event before the
    next one. The time it lay with a dead worker (after its last event) does not count."""
    worked = 0.0
    began: datetime | None = None
    last: datetime | None = None
    for kind, at in rows:
        if kind == ApprovalDecided.kind:  # written by its decider, while no worker held the run
            continue
        if kind in (RunStarted.kind, RunResumed.kind):
            if began is not None and last is not None:
                worked += (last - began).total_seconds()
            began = at
        last = at
    if began is not None and last is not None:
        worked += (last - began).total_seconds()
    return worked


def renewed_limits(events: Sequence[Event], state: RunState | None, worked: float) -> Limits:
    """A continued run gets the budgets it started with once more, counted from what it used."""
    first = next(e for e in events if isinstance(e, RunStarted))
    budget = Limits(**first.limits)
    if state is None:
        return budget
    return dataclasses.replace(
        budget,
        max_iterations=counted_turns(state.step, state.interrupted_steps) + budget.max_iterations,
        max_tool_calls=state.tool_calls + budget.max_tool_calls,
        max_tokens=state.usage.total_tokens + budget.max_tokens,
        max_seconds=worked + budget.max_seconds,
    )


def too_often_resumed(run: AgentRun) -> bool:
    return run.resumes > settings.LOOP_MAX_RESUMES


def resumed_too_often(claimed: Claim) -> str:
    return (
        f"The worker running this stopped {claimed.run.resumes} times while working it (last: "
        f"{claimed.lost_worker}); Loop resumes a run at most {settings.LOOP_MAX_RESUMES} times "
        "(LOOP_MAX_RESUMES), so a run that brings its worker down cannot go on for ever."
    )


def release(run: AgentRun, recorder: RunRecorder) -> None:
    """Put the run back in the queue, waiting for a worker (so no clean stop leaves it
    `running`, and its next worker knows it was not lost), with the reply its recorder held
    (its next worker then goes on from it rather than asking the model again), if the database
    still answers; if it does not, the run counts as lost, which is what it is."""
    try:
        recorder.flush()
    except RunReleased as lost:  # fenced off, or the database went: the reply is asked again
        logger.info("Run %s: its last reply was not recorded: %s", run.pk, lost)
    try:
        AgentRun.objects.filter(
            pk=run.pk, attempt=recorder.attempt, status=RunStatus.RUNNING
        ).update(status=RunStatus.QUEUED, worker="")
    except DatabaseError as error:
        logger.warning("Run %s: could not record the hand back: %s", run.pk, error)


@contextmanager
def watching(
    run: AgentRun, interrupt: Interrupt, stop_requested: Callable[[], StopReason | None]
) -> Iterator[None]:
    """The run's watch: the process's watcher interrupts it as soon as `stop_requested` says so,
    whichever source that reads: procrastinate's abort (a Stop delivered to the worker by
    NOTIFY, or the worker shutting down), the database for a run without a job, Ctrl-C."""
    watch = Watch(run, interrupt, stop_requested)
    WATCHER.add(watch)
    try:
        yield
    finally:
        WATCHER.discard(watch)


@dataclasses.dataclass(eq=False)
class Watch:
    run: AgentRun
    interrupt: Interrupt
    stop_requested: Callable[[], StopReason | None]


class Watcher:
    """One thread for all of this process's runs, asking each run's source every WATCH_INTERVAL
    whether it is to stop. A thread per run did the same 10 times a second each, so 200 runs
    cost 200 threads and 2,000 wake-ups a second; most sources read a flag in memory."""

    def __init__(self) -> None:
        self.watches: set[Watch] = set()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, watch: Watch) -> None:
        with self.lock:
            self.watches.add(watch)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.work, name="run-watcher", daemon=True)
                self.thread.start()

    def discard(self, watch: Watch) -> None:
        with self.lock:
            self.watches.discard(watch)

    def work(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL)
            with self.lock:
                watches = list(self.watches)
            for watch in watches:
                if (reason := self.ask(watch)) is not None:
                    watch.interrupt.set(reason)
                    self.discard(watch)
            connection.close()  # a source that read the database: no connection held between

    def ask(self, watch: Watch) -> StopReason | None:
        """The watch's answer; a source that fails is asked again next time, and the others
        are asked meanwhile."""
        try:
            return asked(watch.stop_requested, watch.run)
        except Exception:
            logger.exception("Run %s: could not read whether it was stopped", watch.run.pk)
            return None


WATCHER = Watcher()


def check_model_still_allowed(run: AgentRun, rights: Rights) -> None:
    """A run resumed after a decision, or taken up again, goes on only on a model its person may
    still use (a Continue is refused earlier: agent.runs.reopen)."""
    name = ModelChoice(run.provider, run.model).name
    if not rights.allows_model(name):
        raise PermissionError(
            f"your groups no longer allow the model {name!r}. Send the task again: it runs on a "
            "model you may use"
        )


def tools_for(
    run: AgentRun,
    stopped: Callable[[], bool] | None = None,
    sandbox: SandboxHost | None = None,
    rights: Rights | None = None,
) -> Tools:
    """The tools as the run sees them: acting for its owner, in the owner's workspace, running
    snippets in `sandbox`. A sandbox that starts once `stopped()` is true is killed at once (the
    run was stopped meanwhile)."""
    context = dataclasses.replace(tool_context(run), stopped=stopped, sandbox=sandbox)
    return registry_for(run.user, allowed_now(run) if rights is None else rights).bind(context)


def tool_context(run: AgentRun) -> ToolContext:
    """Whom the run's tools act for: its owner, in their workspace, at this attempt."""
    return dataclasses.replace(context_for(run.user), run_id=run.pk, attempt=run.attempt)


def recall_for(user: User, task: str) -> list[RecalledMemory]:
    return recall(user, task)


def remember_outcome(run: AgentRun, result: Ended) -> None:
    """Store what was asked, how it ended and the answer, for the run's user, unless it carries
    nothing or is not worth an outcome (memory.hygiene's rules, told whose account the answer
    is and which tool calls worked); the run is over whatever happens here."""
    if run.status not in (RunStatus.SUCCEEDED, RunStatus.HALTED):
        return
    source, worked = result.answer_source, result.ok_tool_calls
    if carries_nothing(run.answer, source=source, ok_tool_calls=worked):
        return
    ok = run.tool_executions.filter(status=ToolStatus.OK).order_by("pk")
    calls = list(ok.values_list("tool", "arguments"))  # one read for both uses
    if not worth_an_outcome({tool for tool, _ in calls}):
        return
    outcome = run.status + (f" ({run.halt_reason})" if run.halt_reason else "")
    files = files_written([arguments for tool, arguments in calls if tool == WRITE_FILE.name])
    text = outcome_text(run.task, outcome, run.answer, files)
    importance = 0.5 if run.status == RunStatus.SUCCEEDED else 0.3
    try:
        remember(run.user, text, importance=importance, source_run_id=run.pk)
    except Exception:
        logger.exception("Run %s: its outcome could not be remembered", run.pk)


def asked(stop_requested: StopSource, run: AgentRun) -> StopReason | None:
    """What the source asks now; a database that does not answer asks nothing (it is read again
    at the next look, and a lost run is the recovery's to find)."""
    try:
        return stop_requested()
    except DatabaseError as error:
        logger.warning("Run %s: could not read whether it was stopped: %s", run.pk, error)
        return None


def resume_here(
    run: AgentRun,
    *,
    on_event: Callable[..., None] | None = None,
    stop_requested: StopSource | None = None,
    sandbox: SandboxHost | None = None,
) -> AgentRun:
    """Continue a run in this process (`runagent --resume`): the checks of Continue, then it is
    worked here to its end."""
    return execute_run(
        reopen(AgentRun.objects.all(), run.pk, by=run.user, queue_it=False),
        on_event=on_event,
        stop_requested=stop_requested,
        sandbox=sandbox,
    )
