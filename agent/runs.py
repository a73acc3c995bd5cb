"""Run operations: what a person, an operator or the CLI asks of runs and conversations. Every
change to a run outside its worker is here; the reads are agent/selectors.py and the worker's side
is engine/execution.py."""

import dataclasses
import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import CharField, Model, QuerySet
from django.utils import timezone

from accounting.quotas import Standing, charge_run_start, reached_before_start
from accounting.send_rate import TooFast, count_send
from agent.abandoned import end_if_abandoned, without_a_process
from agent.allowed import allowed_at_start, allowed_now
from agent.llm.factory import ModelChoice, ModelUnavailable, offered_models, parse, resolve
from agent.models import FINISHED, LIVE, AgentRun, Conversation, QueuedTask, Rating, RunFeedback
from agent.queue import abort_job, defer_run
from agent.recorder import RunRecorder
from agent.selectors import (
    conversation_model,
    conversations_for,
    last_turn_id,
    model_offered,
    runs_for,
)
from agent.signals import stop_requested
from assistants.models import Assistant, AssistantVersion
from assistants.versions import assistants_for, latest_version
from core.ending import run_end
from core.events import PersonSaid, RunStatus
from core.guards import Limits
from core.instructions import INSTRUCTIONS_CHARS
from core.llm import Message
from core.state import RunState
from core.text import excerpt
from rights.effective import Rights

logger = logging.getLogger(__name__)


class InvalidTask(ValueError):
    pass


class TooManyActiveRuns(InvalidTask):
    pass


class ModelNotOffered(InvalidTask):
    pass


class OwnerGone(InvalidTask):
    pass


class AssistantUnavailable(InvalidTask):
    """A conversation's assistant the person may not use (any more): archived, no longer shared
    with them, or never theirs (a forged id)."""


class QuotaReached(InvalidTask):
    """A run refused before it starts: a quota of the person's is reached (`standing` says which,
    and when it resets)."""

    def __init__(self, standing: Standing) -> None:
        super().__init__(standing.in_words())
        self.standing = standing


class SendingTooFast(InvalidTask):
    """A message refused: the person sends faster than LOOP_SEND_RATE_PER_MINUTE."""

    def __init__(self, too_fast: TooFast) -> None:
        super().__init__(too_fast.in_words())
        self.too_fast = too_fast


def count_message(user: User) -> None:
    """Count a message the person sends (a task, a Continue, a new version); refused past the
    send rate, before anything else is done with it."""
    if (too_fast := count_send(user.pk)) is not None:
        raise SendingTooFast(too_fast)


def check_quota(user_id: int, *, starting: bool = True) -> None:
    """Refuse a run's start, or a Continue (not `starting`: the same run goes on, so a runs
    quota does not hold it back), once a quota of the person's is reached. Call inside the
    transaction that records the start: the person's starts are judged one at a time."""
    if (reached := reached_before_start(user_id, starting=starting)) is not None:
        raise QuotaReached(reached)


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


def default_limits(**overrides: Any) -> Limits:
    configured: dict[str, Any] = {
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
    user: User,
    task: str,
    *,
    model: str | ModelChoice = "",
    limits: Limits | None = None,
    conversation: Conversation | None = None,
    version_of: AgentRun | None = None,
    api_key: dict[str, Any] | None = None,
) -> AgentRun:
    """Record a new run for `user`, queued, in `conversation` if given (it must be the user's):
    the run records the provider and model it uses, and the conversation goes on with that model.
    In a conversation it follows the last turn of the branch shown, or, as another version of
    turn `version_of` (regenerated, edited), the turn that one follows; either way it is the
    version shown from now on.
    `model` is a name, resolved here, or a ModelChoice resolved already (chat_model's, one of the
    offered models): a send resolves its model once.

    `api_key`: the key a program started it with, as the run records it (api/).

    Bad input, or one run more than LOOP_USER_ACTIVE_RUNS, raises before anything is stored.
    """
    task = clean_task(task)
    choice = recordable(model if isinstance(model, ModelChoice) else resolve(model))
    with transaction.atomic():
        check_room_for_a_run(user.pk)
        check_quota(user.pk)
        parent = None
        if conversation is not None:
            conversation = conversations_for(user).select_for_update().get(pk=conversation.pk)
            conversation.title = conversation.title or title_from(task)
            conversation.model = choice.name
            # Used again, an archived conversation is back in its owner's list.
            conversation.archived_at = None
            conversation.save(update_fields=["title", "model", "archived_at", "updated_at"])
            parent = version_of.parent_id if version_of else last_turn_id(conversation.pk)
        run = new_run(user, task, choice, conversation, parent, limits, api_key)
        charge_run_start(user.pk, run.pk, run.conversation_id)
        return run


def new_run(
    user: User,
    task: str,
    choice: ModelChoice,
    conversation: Conversation | None,
    parent: int | None,
    limits: Limits | None = None,
    api_key: dict[str, Any] | None = None,
    prelude: list[Message] | None = None,
) -> AgentRun:
    """The run's row, queued, its task and model checked already, with what it is allowed: the
    person's rights under the choices of its conversation's assistant (a model outside them is
    refused here, whatever asked for it). A conversation whose assistant the person may no
    longer use takes no new turn."""
    check_assistant_usable(user, conversation)
    version = assistant_version_for(conversation)
    allowed = allowed_at_start(user, version)
    check_model_allowed(Rights.from_record(allowed["rights"]), choice.name)
    return AgentRun.objects.create(
        user=user,
        allowed=allowed,
        assistant_version=version,
        conversation=conversation,
        parent_id=parent,
        chosen_at=timezone.now(),
        task=task,
        provider=choice.provider,
        model=choice.model,
        limits=dataclasses.asdict(limits or default_limits()),
        api_key=api_key,
        prelude=prelude or [],
    )


def assistant_version_for(conversation: Conversation | None) -> AssistantVersion | None:
    """The version of its assistant a new turn of `conversation` runs with: the latest."""
    if conversation is None or conversation.assistant is None:
        return None
    return latest_version(conversation.assistant)


def check_assistant_usable(user: User, conversation: Conversation | None) -> None:
    """Refuse a turn with an assistant `user` may not use (assistants.versions.assistants_for):
    whoever asks (the chat, the API, `runagent`, a queued task), nothing is stored."""
    if conversation is None or conversation.assistant_id is None:
        return
    if assistants_for(user).filter(pk=conversation.assistant_id).exists():
        return
    name = Assistant.objects.filter(pk=conversation.assistant_id).values_list("name", flat=True)
    raise AssistantUnavailable(
        f"The assistant {excerpt(name.first() or '', 80)!r} is archived or not shared with you "
        "(any more), so nothing was sent. Start a new conversation, with another assistant or "
        "none."
    )


def check_model_allowed(rights: Rights, name: str) -> None:
    """Refuse a model outside the person's rights (rights.effective), saying which they have:
    whatever the page or program asked (a tampered form, a forged request)."""
    if rights.allows_model(name):
        return
    if not rights.models:
        raise ModelNotOffered(
            "Your groups give you no model to run on, so nothing was sent. Ask an operator to add "
            "you to a group that may use one."
        )
    names = ", ".join(sorted(rights.models))
    raise ModelNotOffered(
        f"You may not use the model {excerpt(name, 80)!r}; nothing was sent. The models you may "
        f"use: {names}."
    )


def column_width(model: type[Model], name: str) -> int:
    """The characters a text column holds (its max_length; every text column here has one)."""
    field = model._meta.get_field(name)
    width = field.max_length if isinstance(field, CharField) else None
    if width is None:
        raise TypeError(f"{model.__name__}.{name} is no bounded text column")
    return width


def recordable(choice: ModelChoice) -> ModelChoice:
    """The choice, if a run and its conversation can record it; a name longer than their columns
    is refused with the reason, before anything is stored (not a database error)."""
    longest = min(
        column_width(AgentRun, "model"),
        column_width(Conversation, "model") - len(f"{choice.provider}:"),
    )
    if len(choice.model) > longest:
        raise InvalidTask(
            f"The model name {excerpt(choice.model, 60)!r} is {len(choice.model)} characters "
            f"long; Loop records model names of at most {longest}. Serve the model under a "
            "shorter name (vLLM: --served-model-name; Ollama: `ollama cp`) and name that."
        )
    return choice


def check_room_for_a_run(user_id: int) -> None:
    """Refuse one live run more than LOOP_USER_ACTIVE_RUNS. Call inside a transaction: the user's
    row stays locked to its end, so two starts at once cannot both pass the limit."""
    lock_owner(user_id)
    live = AgentRun.objects.filter(user_id=user_id, status__in=LIVE)
    # A run of `runagent`'s whose process is gone holds no place: nothing will resume it (the
    # recovery ends it interrupted, and `runagent --resume` takes it up).
    gone = without_a_process(live.filter(job_id__isnull=True))
    active = live.exclude(pk__in=gone.values("pk")).count()
    if active >= settings.LOOP_USER_ACTIVE_RUNS:
        runs = "run" if active == 1 else "runs"
        raise TooManyActiveRuns(
            f"You have {active} {runs} going, the most Loop runs at once for one person. "
            "Wait for one to finish, or stop one, then try again."
        )


def lock_owner(user_id: int) -> None:
    """Hold the user's row to the end of the transaction: one live run more is judged, and an
    account deleted, one at a time."""
    get_user_model().objects.select_for_update().filter(pk=user_id).first()


def submit_run(
    user: User,
    task: str,
    conversation: Conversation,
    *,
    model: str | ModelChoice = "",
    api_key: dict[str, Any] | None = None,
) -> AgentRun:
    """Start a run in `conversation` and queue it for a worker; returns at once."""
    with transaction.atomic():
        run = start_run(user, task, model=model, conversation=conversation, api_key=api_key)
        queue(run)
    return run


def queue(run: AgentRun, priority: int = 0) -> None:
    """Give the run a job, stored with it: a worker sees both or neither."""
    run.job_id = defer_run(run.pk, priority)
    AgentRun.objects.filter(pk=run.pk).update(job_id=run.job_id)


def submit_first_run(
    user: User,
    task: str,
    *,
    model: str | ModelChoice = "",
    api_key: dict[str, Any] | None = None,
    instructions: str = "",
    prelude: list[Message] | None = None,
    assistant: Assistant | None = None,
) -> AgentRun:
    """Start a new conversation with `task`; if the run is refused, no conversation is kept.
    As start_run and submit_run do, in one transaction without their savepoints: the
    conversation is made with its title and model, and nothing else can see it yet, so it is not
    locked and read again, and its first turn follows none (seven statements fewer a send).

    `instructions`: the conversation's (INSTRUCTIONS_CHARS at most); `prelude`: the messages a
    program gave before the task (AgentRun.prelude), which the model reads before it.
    `assistant`: the one the conversation is started with (one `user` may use: the caller's
    check); with no model asked for, its model if it names one."""
    task = clean_task(task)
    if assistant is not None and not model:
        model = assistant.model
    check_instructions(instructions)
    choice = recordable(model if isinstance(model, ModelChoice) else resolve(model))
    with transaction.atomic():
        check_room_for_a_run(user.pk)
        check_quota(user.pk)
        conversation = Conversation.objects.create(
            owner=user,
            title=title_from(task),
            model=choice.name,
            instructions=instructions,
            assistant=assistant,
        )
        run = new_run(user, task, choice, conversation, None, api_key=api_key, prelude=prelude)
        charge_run_start(user.pk, run.pk, conversation.pk)
        queue(run)
    return run


def check_instructions(instructions: str) -> None:
    """Refuse a conversation's instructions longer than the conversation keeps, before anything
    is stored (the settings' form refuses the same)."""
    if len(instructions) > INSTRUCTIONS_CHARS:
        raise InvalidTask(
            f"The instructions are {len(instructions):,} characters long; a conversation keeps "
            f"at most {INSTRUCTIONS_CHARS:,}. Shorten them."
        )


def chat_model(
    conversation: Conversation | None,
    picked: str = "",
    offered: list[ModelChoice] | None = None,
    rights: Rights | None = None,
) -> ModelChoice:
    """The model a person's next task in `conversation` (None: a new one) runs on: the one they
    picked, which must be one this Loop offers (the page lists only those, so any other name is
    a tampered form: refused, before anything is stored), else the one the conversation goes on
    with (selectors.conversation_model). A person may pick another model for any message: the
    conversation's earlier turns reach the model as plain text, whichever model wrote them.

    The choice is resolved (one of `offered`, else the default checked): start_run takes it as it
    is. `offered` is offered_models(), given when the request has it already; with the person's
    `rights` (rights.effective.rights_of), offered_models(rights), and a model picked outside
    them is refused saying which they may use."""
    offered = offered_models(rights) if offered is None else offered
    if picked and rights is not None:
        check_model_allowed(rights, parse(picked).name)
    if not picked:
        try:
            return conversation_model(conversation, offered)
        except ModelUnavailable as error:
            raise InvalidTask(str(error)) from error
    choice = parse(picked)
    if choice not in offered:
        names = ", ".join(offered_choice.name for offered_choice in offered) or "none"
        raise ModelNotOffered(
            f"This Loop does not offer the model {excerpt(picked, 80)!r}; nothing was sent. "
            f"Pick one of the models it offers ({names}) and send again."
        )
    return choice


def title_from(task: str) -> str:
    return excerpt(task, TITLE_CHARS)


def cancel_run(user: User, run_id: int) -> AgentRun:
    """Ask `user`'s run to stop. Another user's run does not exist, as far as this is concerned."""
    return request_cancel(runs_for(user).get(pk=run_id))


def can_cancel_any_run(user: User) -> bool:
    """Operators may stop anyone's run: active staff allowed to change runs (runs are otherwise
    never edited, so that permission means "may cancel")."""
    return user.is_active and user.is_staff and user.has_perm("agent.change_agentrun")


def cancel_run_as_operator(operator: User, run_id: int) -> AgentRun:
    """Ask any user's run to stop, on an operator's behalf; it ends as if its owner had asked."""
    if not can_cancel_any_run(operator):
        raise PermissionDenied(f"{operator.get_username()} may not cancel other users' runs.")
    return request_cancel(AgentRun.objects.get(pk=run_id))


def request_cancel(run: AgentRun) -> AgentRun:
    """A queued run ends at once; a running one stops within a second wherever it is (its worker
    hears it from procrastinate), or at once, here, when its process is gone (a dead worker, a
    killed `runagent`): nobody else would hear the Stop. A finished run stays as it ended.
    Whatever happens meanwhile, the Stop is recorded first, so the run's next claim reads it."""
    now = timezone.now()
    job_id = record_stop(run.pk, now)
    if any(ended for _, ended in stop_requested.send(sender=AgentRun, run_id=run.pk)):
        pass  # it waited for a decision (approvals ended it): no worker holds it
    elif not end_queued(run.pk):
        end_if_abandoned(run.pk, RunStatus.CANCELLED)
    abort_job(job_id)
    run.refresh_from_db()
    return run


def record_stop(run_id: int, now: datetime) -> int | None:
    """Record the Stop on a live run, with its row held, and say which job the run has then: a
    claim before it has that job, which is aborted; a claim after it reads the Stop
    (engine.execution.claim) and ends the run cancelled before any call. So a Stop that waits
    behind a decision queueing the run, or reaches a dead worker's run before another worker
    takes it, is heard all the same. The one writer of `cancel_requested_at` (a Continue clears
    it); the first Stop's time is kept."""
    with transaction.atomic():
        live = AgentRun.objects.select_for_update().filter(pk=run_id, status__in=LIVE)
        job_id = live.values_list("job_id", flat=True).first()
        live.filter(cancel_requested_at__isnull=True).update(cancel_requested_at=now)
    return job_id


def end_queued(run_id: int) -> bool:
    """End the run cancelled if it is waiting for a worker, as any end is recorded; False if it
    is not queued. The row stays locked until its end is written, so no worker claims it
    meanwhile."""
    with transaction.atomic():
        run = AgentRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != RunStatus.QUEUED:
            return False
        went = run.events.exists()  # handed back by a worker that stopped, or continued
        note = "Cancelled while it waited for a worker." if went else "Cancelled before it started."
        ended = run_end(RunState(), RunStatus.CANCELLED, note)
        recorder = RunRecorder(run, on_end=start_next_queued)
        rows = recorder.record([ended])
    recorder.announce(rows)  # once committed: a page woken by it reads the end
    return True


def start_next_queued(run: AgentRun) -> AgentRun | None:
    """In the transaction that ends `run`: what its person sent it and it never read waits its
    turn again (what it read is in its log), and the oldest task waiting in its conversation
    becomes the conversation's next run. The page that sees the end finds the new run there."""
    if run.conversation_id is None:
        return None
    if not QueuedTask.objects.filter(conversation_id=run.conversation_id).exists():
        return None  # most ends: one indexed look, no lock
    sent = QueuedTask.objects.filter(sent_to=run)
    if sent.exists():
        heard = run.events.filter(kind=PersonSaid.kind).values_list("data__message", flat=True)
        sent.filter(pk__in=list(heard)).delete()
        sent.update(sent_to=None)
    return start_waiting(run.conversation_id)


def start_waiting(conversation_id: int) -> AgentRun | None:
    """The oldest task waiting in the conversation, started as its next run if no run of it is
    live. None if nothing starts; a task refused (its person has too many runs going, the
    model is gone) keeps waiting, and the recovery tries again (engine/tasks.py)."""
    owner = Conversation.objects.filter(pk=conversation_id).values_list("owner_id", flat=True)
    owner_id = owner.first()
    if owner_id is None:  # the conversation is gone, and its waiting tasks with it
        return None
    lock_owner(owner_id)  # first the person, then the conversation, as start_run locks
    Conversation.objects.select_for_update().filter(pk=conversation_id).first()
    waiting = QueuedTask.objects.filter(conversation_id=conversation_id, sent_to__isnull=True)
    task = waiting.select_related("conversation__owner").first()
    if (
        task is None
        or AgentRun.objects.filter(conversation_id=conversation_id, status__in=LIVE).exists()
    ):
        return None
    conversation = task.conversation
    if conversation.deleted_at is not None:
        waiting.delete()
        return None
    try:
        with transaction.atomic():
            model = task.model or conversation.model
            run = start_run(conversation.owner, task.text, model=model, conversation=conversation)
            queue(run)
    except (InvalidTask, ModelUnavailable) as refusal:
        logger.info("Conversation %s: its queued task waits: %s", conversation_id, refusal)
        return None
    task.delete()
    return run


def new_version(
    user: User, run_id: int, *, task: str | None = None, model: str | ModelChoice = ""
) -> AgentRun:
    """Another version of one of `user`'s turns, queued: its task asked again (regenerate,
    `task` None), or `task` instead (an edit, checked as any task is), following the same turn
    as it, and shown from now on; the turns that followed the old version stay with it, a branch
    a person can go back to. Only a turn that ended, while no run goes in its conversation: a
    fork is made between whole turns, never at a tool call waiting for its result."""
    with transaction.atomic():
        run = runs_for(user).select_for_update(of=("self",)).get(pk=run_id)
        if run.conversation_id is None:
            raise InvalidTask("Only a conversation's turns have versions.")
        live = AgentRun.objects.filter(conversation_id=run.conversation_id, status__in=LIVE)
        if live.exists():
            raise InvalidTask(
                "A task is going in this conversation: wait for it to end, or stop it, first."
            )
        new = start_run(
            user,
            run.task if task is None else task,
            model=model,
            conversation=run.conversation,
            version_of=run,
        )
        queue(new)
    return new


def show_version(user: User, run_id: int) -> AgentRun:
    """Show this version of its turn, and the branch that follows it, from now on."""
    run = runs_for(user).exclude(conversation=None).get(pk=run_id)
    AgentRun.objects.filter(pk=run.pk).update(chosen_at=timezone.now())
    return run


FEEDBACK_CHARS = 2000


def rate_run(user: User, run_id: int, rating: str, comment: str = "") -> RunFeedback:
    """Keep what `user` thinks of their run's answer (a rating, and why if they say), replacing
    what they thought before. Only a finished run of theirs; another's does not exist here."""
    if rating not in Rating.values:
        raise InvalidTask("Rate the answer up or down.")
    comment = comment.replace("\x00", "").strip()
    if len(comment) > FEEDBACK_CHARS:
        raise InvalidTask(f"Say it in at most {FEEDBACK_CHARS:,} characters.")
    run = runs_for(user).get(pk=run_id)
    if run.status not in FINISHED:
        raise InvalidTask("Rate the answer once the run has ended.")
    feedback, _ = RunFeedback.objects.update_or_create(
        run=run, defaults={"rating": rating, "comment": comment}
    )
    return feedback


def continue_run(user: User, run_id: int) -> AgentRun:
    """Queue `user`'s halted, stopped, interrupted or model-failed run to go on from its log, on
    the model it recorded, while this Loop still offers that model (an operator may go on
    regardless). Another user's run does not exist, as far as this is concerned."""
    check_still_offered(runs_for(user).get(pk=run_id))
    return reopen(runs_for(user), run_id, by=user, queue_it=True)


def check_still_offered(run: AgentRun) -> None:
    """A run goes on on the model it recorded; a person may not use one the operator has taken
    out of LOOP_MODELS (or away from the default) since, by continuing a run that used it."""
    if not model_offered(run):
        used = ModelChoice(run.provider, run.model)
        raise ModelNotOffered(
            f"Run {run.pk} ran on the model {used.name!r}, which this Loop no longer offers, so "
            "it cannot go on. To carry on, send the task again: it runs on a model offered here."
        )


def can_continue_any_run(user: User) -> bool:
    """Operators who may stop anyone's run may also ask it to go on."""
    return can_cancel_any_run(user)


def continue_run_as_operator(operator: User, run_id: int) -> AgentRun:
    if not can_continue_any_run(operator):
        raise PermissionDenied(f"{operator.get_username()} may not continue other users' runs.")
    return reopen(AgentRun.objects.all(), run_id, by=operator, queue_it=True)


def reopen(runs: QuerySet[AgentRun], run_id: int, *, by: User, queue_it: bool) -> AgentRun:
    """Put a run that may go on back in the queue, asked `by` its owner or an operator: it counts
    as one of its owner's live runs again, and its next worker picks it up from its log with
    renewed limits."""
    with transaction.atomic():
        # The owner's row first, then the run, in the order starting a run and deleting an
        # account take them, so a Continue racing either waits instead of deadlocking.
        owner = runs.filter(pk=run_id).values_list("user_id", flat=True).get()
        lock_owner(owner)
        run = runs.select_for_update(of=("self",)).get(pk=run_id)
        check_owner_active(run)
        # Its person's rights as they stand now bind it: a model taken away is not gone on with.
        check_model_allowed(allowed_now(run), ModelChoice(run.provider, run.model).name)
        check_log_kept(run)
        if not run.can_continue:
            raise InvalidTask(
                f"Run {run.pk} {run.status}: only a run that was halted, stopped, interrupted, or "
                "failed because the model did not answer can be continued."
            )
        check_room_for_a_run(run.user_id)
        check_quota(run.user_id, starting=False)  # the same run goes on: no start charged
        AgentRun.objects.filter(pk=run.pk).update(
            status=RunStatus.QUEUED,
            halt_reason="",
            answer="",
            error="",
            cause="",
            finished_at=None,
            cancel_requested_at=None,
            worker="",
            job_id=None,
            continue_requested_by=by,
        )
        run.refresh_from_db()
        if queue_it:
            queue(run)
    return run


class LogPruned(InvalidTask):
    pass


def check_log_kept(run: AgentRun) -> None:
    """A run goes on from its event log: once the retention pruned it (agent/retention.py),
    there is nothing to go on from."""
    if run.log_pruned_at is not None:
        raise LogPruned(
            f"Run {run.pk} cannot go on: its log was pruned on {run.log_pruned_at:%Y-%m-%d} "
            "(LOOP_KEEP_EVENTS_DAYS), and a run goes on from its log. To carry on, send the "
            "task again."
        )


def check_owner_active(run: AgentRun) -> None:
    """A run acts for its owner, in their workspace and memories: it goes on only while that
    account may use Loop. A deleted account's runs belong to an inactive placeholder, so no one
    continues them (the person, an operator, runagent), nor a deactivated account's runs."""
    if not run.owner_active:
        raise OwnerGone(
            f"Run {run.pk} cannot go on: the account it acts for was deleted or deactivated, and "
            "a run acts only for an account that may use Loop. Its record stays as it ended."
        )


def new_conversation(user: User, title: str = "") -> Conversation:
    return Conversation.objects.create(owner=user, title=title.strip()[:200])


def rename_conversation(user: User, conversation_id: int, title: str) -> Conversation:
    conversation = conversations_for(user).get(pk=conversation_id)
    conversation.title = " ".join(title.split())[:200]
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def pin_conversation(user: User, conversation_id: int, *, pinned: bool) -> None:
    """Pin the conversation to the top of its owner's list, or unpin it. Its place by last use
    (`updated_at`) is kept: an update, not a save, which would move it to the top as if used."""
    mark_conversation(user, conversation_id, pinned_at=timezone.now() if pinned else None)


def archive_conversation(user: User, conversation_id: int, *, archived: bool) -> None:
    """Take the conversation out of its owner's list into the Archived view, or bring it back.
    Its runs go on, and it can still be opened and continued."""
    mark_conversation(user, conversation_id, archived_at=timezone.now() if archived else None)


def mark_conversation(user: User, conversation_id: int, **marks: datetime | None) -> None:
    """Set the marks of one of the user's conversations; another person's, or one deleted, is
    Conversation.DoesNotExist, as if it did not exist."""
    if not conversations_for(user).filter(pk=conversation_id).update(**marks):
        raise Conversation.DoesNotExist


def delete_conversation(user: User, conversation_id: int) -> None:
    """Gone for the user, with its runs; the rows stay for operators. Runs still going stop."""
    conversation = conversations_for(user).get(pk=conversation_id)
    for run_id in conversation.runs.exclude(status__in=FINISHED).values_list("pk", flat=True):
        cancel_run(user, run_id)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])
