"""Run operations: the few functions the CLI, the web views and the task queue all call."""

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from functools import partial

import django_tasks
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from agent.events import RunFinished, RunStatus, event_from_dict
from agent.history import messages_from_events
from agent.llm.base import LLM, Message
from agent.llm.factory import default_model, llm_for
from agent.llm.tokens import count_tokens
from agent.loop import Limits, RecalledMemory, Tools, run_agent
from agent.models import FINISHED, AgentRun, Conversation
from agent.recorder import RunRecorder
from agent.toolset import default_registry
from agent.worker import WorkerStopping, stop_signals_interrupt
from memory.hygiene import carries_nothing, files_written, outcome_text
from memory.store import recall, remember
from tools.base import ToolStatus
from tools.files import WRITE_FILE
from tools.workspace import context_for

logger = logging.getLogger(__name__)

CANCEL_POLL_INTERVAL = 0.2


class InvalidTask(ValueError):
    pass


class RunNotQueued(RuntimeError):
    pass


class TooManyActiveRuns(InvalidTask):
    pass


TITLE_CHARS = 60


def clean_task(task: str) -> str:
    task = task.replace("\x00", "").strip()
    if not task:
        raise InvalidTask("The task is empty. Say what the agent should do.")
    if len(task) > settings.LOOP_TASK_MAX_CHARS:
        raise InvalidTask(
            f"The task is {len(task):,} characters long; the limit is "
            f"{settings.LOOP_TASK_MAX_CHARS:,}. Shorten it, or put the material in a file and "
            "ask the agent to read it."
        )
    return task


def default_limits(**overrides: float) -> Limits:
    configured = {
        "max_iterations": settings.LOOP_MAX_ITERATIONS,
        "max_seconds": settings.LOOP_RUN_SECONDS,
        "max_tokens": settings.LOOP_RUN_TOKENS,
        "max_tool_calls": settings.LOOP_RUN_TOOL_CALLS,
        "max_tool_failures": settings.LOOP_BREAKER_FAILURES,
        "max_identical_calls": settings.LOOP_BREAKER_IDENTICAL_CALLS,
        "max_parallel_calls": settings.LOOP_PARALLEL_TOOL_CALLS,
    }
    return Limits(**(configured | overrides))


def start_run(
    user: AbstractBaseUser,
    task: str,
    *,
    model: str = "",
    limits: Limits | None = None,
    conversation: Conversation | None = None,
) -> AgentRun:
    """Record a new run for `user`, queued, in `conversation` if given (it must be the user's).

    Bad input, or one run more than LOOP_USER_ACTIVE_RUNS, raises before anything is stored.
    """
    task = clean_task(task)
    model = model or default_model()
    llm = llm_for(model)
    with transaction.atomic():
        # One start at a time per user, so two at once cannot both pass the limit.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        active = AgentRun.objects.filter(
            user=user, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)
        ).count()
        if active >= settings.LOOP_USER_ACTIVE_RUNS:
            raise TooManyActiveRuns(
                f"You have {active} runs going, the most Loop runs at once for one person. "
                "Wait for one to finish, or stop one, then send this again."
            )
        if conversation is not None:
            conversation = conversations_for(user).select_for_update().get(pk=conversation.pk)
            conversation.title = conversation.title or title_from(task)
            conversation.save(update_fields=["title", "updated_at"])
        return AgentRun.objects.create(
            user=user,
            conversation=conversation,
            task=task,
            provider=llm.provider,
            model=llm.model,
            limits=dataclasses.asdict(limits or default_limits()),
        )


def submit_run(
    user: AbstractBaseUser, task: str, conversation: Conversation, *, model: str = ""
) -> AgentRun:
    """Start a run in `conversation` and queue it for a worker; returns at once."""
    with transaction.atomic():
        run = start_run(user, task, model=model, conversation=conversation)
        work_run.enqueue(run.pk)  # stored with the run: a worker sees both or neither
    return run


@django_tasks.task()
def work_run(run_id: int) -> str:
    """Work a queued run to its end; one cancelled before it started has nothing left to do."""
    run = AgentRun.objects.get(pk=run_id)
    if run.status != RunStatus.QUEUED:
        return run.status
    with stop_signals_interrupt() as stopping:
        try:
            return execute_run(run, cancelled=stopping).status
        except WorkerStopping:  # recorded as interrupted; the worker stops next
            return RunStatus.INTERRUPTED


def submit_first_run(user: AbstractBaseUser, task: str, *, model: str = "") -> AgentRun:
    """Start a new conversation with `task`; if the run is refused, no conversation is kept."""
    with transaction.atomic():
        return submit_run(user, task, new_conversation(user), model=model)


def title_from(task: str) -> str:
    line = " ".join(task.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def execute_run(
    run: AgentRun,
    *,
    on_event: Callable[..., None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    llm: LLM | None = None,
    tools: Tools | None = None,
) -> AgentRun:
    """Work a queued run to its end in this process; every event is recorded as it happens."""
    now = timezone.now()
    claimed = AgentRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=now, heartbeat_at=now
    )
    if not claimed:
        raise RunNotQueued(f"Run {run.pk} is not queued; it is {run.status}.")
    recorder = RunRecorder(run, then=on_event)
    try:
        llm = llm or streaming(llm_for(run.model), recorder.stream)
        tools = tools or tools_for(run)
        limits = Limits(**run.limits)
    except Exception as error:
        logger.exception("Run %s could not start", run.pk)
        recorder.end(RunStatus.FAILED, f"The run could not start: {error}")
        run.refresh_from_db()
        return run
    try:
        result = run_agent(
            run.task,
            llm=llm,
            tools=tools,
            sink=recorder,
            limits=limits,
            recall=partial(recall_for, run.user),
            cancelled=cancel_flag(run, cancelled),
            history=conversation_context(run),
        )
    except (KeyboardInterrupt, SystemExit) as stop:  # the process is going away
        recorder.end(
            RunStatus.INTERRUPTED, f"The process running it stopped ({type(stop).__name__})."
        )
        raise
    if not recorder.finished:  # the loop reported its end, but recording that failed
        AgentRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
            status=result.status,
            halt_reason=result.halt_reason or "",
            answer=result.answer,
            error=result.error,
            finished_at=timezone.now(),
        )
    run.refresh_from_db()
    if not result.answer_cut:  # an answer cut short is shown, never recalled as a fact
        remember_outcome(run)
    return run


def streaming(llm: LLM, deltas: Callable[[str], None]) -> LLM:
    """A model that can stream its replies (one with a `deltas` sink: the mock, GroqLLM) streams
    them to `deltas`."""
    if hasattr(llm, "deltas") and llm.deltas is None:
        llm.deltas = deltas
    return llm


def tools_for(run: AgentRun) -> Tools:
    """The tools as the run sees them: acting for its owner, in the owner's workspace."""
    return default_registry().bind(dataclasses.replace(context_for(run.user), run_id=run.pk))


def recall_for(user: AbstractBaseUser, task: str) -> list[RecalledMemory]:
    return [RecalledMemory(m.id, m.text, m.score, m.parts) for m in recall(user, task)]


def remember_outcome(run: AgentRun) -> None:
    """Store what was asked, how it ended and the answer, for the run's user; the run is over
    whatever happens here."""
    if run.status not in (RunStatus.SUCCEEDED, RunStatus.HALTED) or carries_nothing(run.answer):
        return
    outcome = run.status + (f" ({run.halt_reason})" if run.halt_reason else "")
    written = run.tool_executions.filter(tool=WRITE_FILE.name, status=ToolStatus.OK)
    files = files_written(written.order_by("pk").values_list("arguments", flat=True))
    text = outcome_text(run.task, outcome, run.answer, files)
    importance = 0.5 if run.status == RunStatus.SUCCEEDED else 0.3
    try:
        remember(run.user, text, importance=importance, source_run_id=run.pk)
    except Exception:
        logger.exception("Run %s: its outcome could not be remembered", run.pk)


def cancel_flag(run: AgentRun, local: Callable[[], bool] | None) -> Callable[[], bool]:
    """Whether the run should stop: asked here (e.g. Ctrl-C), or by anyone through the database.

    The database is read at most every CANCEL_POLL_INTERVAL seconds, so a fast run of many short
    steps does not pay a query per check; a model turn takes longer than that anyway.
    """
    last_read = -math.inf
    requested = False

    def check() -> bool:
        nonlocal last_read, requested
        if local is not None and local():
            return True
        if not requested and time.monotonic() - last_read >= CANCEL_POLL_INTERVAL:
            last_read = time.monotonic()
            requested = AgentRun.objects.filter(
                pk=run.pk, cancel_requested_at__isnull=False
            ).exists()
        return requested

    return check


def cancel_run(user: AbstractBaseUser, run_id: int) -> AgentRun:
    """Ask `user`'s run to stop. Another user's run does not exist, as far as this is concerned."""
    return request_cancel(runs_for(user).get(pk=run_id))


def can_cancel_any_run(user: AbstractBaseUser) -> bool:
    """Operators may stop anyone's run: active staff allowed to change runs (runs are otherwise
    never edited, so that permission means "may cancel")."""
    return user.is_active and user.is_staff and user.has_perm("agent.change_agentrun")


def cancel_run_as_operator(operator: AbstractBaseUser, run_id: int) -> AgentRun:
    """Ask any user's run to stop, on an operator's behalf; it ends as if its owner had asked."""
    if not can_cancel_any_run(operator):
        raise PermissionDenied(f"{operator.get_username()} may not cancel other users' runs.")
    return request_cancel(AgentRun.objects.get(pk=run_id))


def request_cancel(run: AgentRun) -> AgentRun:
    """A queued run ends at once; a running one stops at its next check. A finished run stays as
    it ended."""
    now = timezone.now()
    if AgentRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
        status=RunStatus.CANCELLED, cancel_requested_at=now, finished_at=now
    ):
        RunRecorder(run)(RunFinished(RunStatus.CANCELLED.value, "Cancelled before it started."))
    else:
        AgentRun.objects.filter(
            pk=run.pk, status=RunStatus.RUNNING, cancel_requested_at__isnull=True
        ).update(cancel_requested_at=now)
    run.refresh_from_db()
    return run


def runs_for(user: AbstractBaseUser) -> QuerySet[AgentRun]:
    """The user's runs, less those of conversations they deleted."""
    return AgentRun.objects.filter(user=user).filter(
        Q(conversation__isnull=True) | Q(conversation__deleted_at__isnull=True)
    )


def conversation_context(run: AgentRun) -> list[Message]:
    """The conversation's earlier turns (task, then final answer), newest last, within
    LOOP_CONVERSATION_TOKENS; older turns are left out, and a one-line note says how many."""
    if run.conversation_id is None:
        return []
    earlier = (
        AgentRun.objects.filter(conversation_id=run.conversation_id, pk__lt=run.pk)
        .filter(status__in=FINISHED)
        .exclude(answer="")
        .order_by("-pk")
        .values_list("task", "answer")
    )
    budget = settings.LOOP_CONVERSATION_TOKENS
    turns: list[Message] = []
    dropped = 0
    for task, answer in earlier:
        cost = count_tokens(task) + count_tokens(answer)
        if dropped or cost > budget:
            dropped += 1
            continue
        budget -= cost
        turns[:0] = [{"role": "user", "content": task}, {"role": "assistant", "content": answer}]
    if dropped:
        note = (
            f"[Loop] {dropped} earlier turn{'s' if dropped > 1 else ''} of this conversation "
            "left out to fit the context budget."
        )
        turns.insert(0, {"role": "system", "content": note})
    return turns


def conversations_for(user: AbstractBaseUser) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user, deleted_at__isnull=True)


def new_conversation(user: AbstractBaseUser, title: str = "") -> Conversation:
    return Conversation.objects.create(owner=user, title=title.strip()[:200])


def rename_conversation(user: AbstractBaseUser, conversation_id: int, title: str) -> Conversation:
    conversation = conversations_for(user).get(pk=conversation_id)
    conversation.title = " ".join(title.split())[:200]
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def delete_conversation(user: AbstractBaseUser, conversation_id: int) -> None:
    """Gone for the user, with its runs; the rows stay for operators. Runs still going stop."""
    conversation = conversations_for(user).get(pk=conversation_id)
    for run_id in conversation.runs.exclude(status__in=FINISHED).values_list("pk", flat=True):
        cancel_run(user, run_id)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])


def history_of(run: AgentRun) -> list[Message]:
    """The message history as the model saw it, rebuilt from the run's event log alone."""
    events = run.events.order_by("seq").values_list("kind", "data")
    return messages_from_events(event_from_dict(kind, data) for kind, data in events)
