"""`manage.py runagent "task"`: run one task from the terminal, printing each step as it happens,
and asking its person about each tool call that waits for a decision (core.approval).
`manage.py runagent --resume RUN_ID`: continue a run that stopped early (or whose process is
gone), here, from where it stopped; or decide the calls a waiting run waits on, then work it
here."""

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.urls import reverse

from accounting.ledger import Spend, spend_of_run
from accounting.models import Measure
from accounting.quotas import Standing, amount_in_words, moment_in_words, standings
from accounting.reports import amount_text, cost_text, single_cost
from agent.abandoned import end_if_abandoned, process_gone
from agent.llm.factory import ModelUnavailable
from agent.models import AgentRun, Conversation
from agent.runs import InvalidTask, chat_model, default_limits, start_run
from approvals.terminal import (
    Chooser,
    LeftWaiting,
    Terminal,
    approve,
    decide_here,
    terminal_safe,
    waiting_count,
)
from assistants.versions import find_for
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    Decision,
    Event,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)
from core.interrupt import StopReason
from core.loop import Limits
from core.recalled import RecalledMemory
from core.text import excerpt
from core.wording import OWNERS_WHO, resumed_text
from engine.execution import RunNotQueued, StopSource, execute_run, resume_here
from mcp_servers.discovery import discover_new_site_servers
from rights.effective import rights_of
from sandbox.host import SandboxHost

CLI_USER = "cli"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
USAGE_ERROR = 2
LINE_CHARS = 160  # the most of a text one line of the transcript shows
EXIT_CODES: dict[str, int] = {
    RunStatus.SUCCEEDED: 0,
    RunStatus.FAILED: 1,
    RunStatus.HALTED: 3,
    RunStatus.CANCELLED: 4,
    RunStatus.INTERRUPTED: 5,
    # It waits for a decision nobody here could give (no terminal, no --yes); the call has not
    # run.
    RunStatus.AWAITING_APPROVAL: 6,
}
# How the transcript says what became of a call that waited (an approval_decided event).
DECIDED = {
    Decision.APPROVE: "approved",
    Decision.EDIT: "edited and approved",
    Decision.DENY: "denied",
    Decision.EXPIRED: "not run: nobody decided in time",
    Decision.CANCELLED: "not run: the run was stopped",
}
# Ctrl-C while a decision was asked for (128 + SIGINT, as a shell reports it): the run still waits.
STOPPED_ASKING = 128 + signal.SIGINT


class Command(BaseCommand):
    help = (
        "Run one task through the agent, printing each step live; in a terminal, a tool call "
        "that needs a decision is shown and asked about (approve, edit, deny). Exit status: 0 "
        "succeeded, 1 failed, 2 bad usage, 3 halted (breaker, cap or budget), 4 cancelled "
        "(Ctrl-C or SIGTERM), 5 interrupted, 6 waiting for a decision (no terminal to ask in, "
        "and no --yes), 130 Ctrl-C while a decision was asked for (the run still waits). -v 2 "
        "prints the model's reasoning whole and every library's log. --resume RUN_ID continues "
        "a halted, stopped, interrupted or model-failed run instead, or a run whose process is "
        "gone, or asks for the decisions a waiting run waits on and works it here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task", nargs="?", help="What the agent should do.")
        parser.add_argument(
            "--resume",
            type=int,
            metavar="RUN_ID",
            help=(
                "Continue this run here from where it stopped, with a fresh set of limits (a run "
                "still running whose process is gone is first ended interrupted)."
            ),
        )
        parser.add_argument(
            "--user",
            help=f"The user the run acts for (default: {CLI_USER!r}, created on first use).",
        )
        parser.add_argument(
            "--model",
            default="",
            help=(
                "mock, groq:<model>, openai:<model> (the server at LOOP_OPENAI_BASE_URL), or a "
                "bare name (docs/models.md). Default: from settings."
            ),
        )
        parser.add_argument(
            "--assistant",
            default="",
            metavar="NAME_OR_ID",
            help=(
                "Run as this assistant of the user's (their own, a group's or the site's): its "
                "instructions, tools, approvals, memory and, with no --model, its model."
            ),
        )
        parser.add_argument(
            "--max-iterations", type=int, help="Model turns before the run is halted."
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object per event instead."
        )
        parser.add_argument(
            "--yes",
            action="store_true",
            help="Approve every tool call that waits for a decision, without asking.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.verbose = options["verbosity"] >= 2
        if self.verbose:  # every library's INFO log too, httpx's request lines among them
            logging.getLogger().setLevel(logging.INFO)
        # The sandboxes its runs' snippets run in: this process's, closed as the command ends.
        with SandboxHost() as self.sandbox:
            run = self.resume(options) if options["resume"] is not None else self.start(options)
        if EXIT_CODES.get(run.status, 1):
            raise SystemExit(EXIT_CODES.get(run.status, 1))

    def start(self, options: dict[str, Any]) -> AgentRun:
        if options["task"] is None:
            raise CommandError(
                "Say what the agent should do, or give --resume RUN_ID.", returncode=USAGE_ERROR
            )
        limits = self.limits(options["max_iterations"])
        user = self.user(options["user"])
        discover_new_site_servers()  # a server declared just now: its tools, for this run too
        try:
            run = self.started(user, options, limits)
        except (InvalidTask, ModelUnavailable) as error:
            raise CommandError(str(error), returncode=USAGE_ERROR) from None
        if run.assistant_version is not None and not options["json"]:
            version = run.assistant_version
            self.stdout.write(
                f"Assistant: {version.snapshot.get('name')} (version {version.number})"
            )
        show = self.json_line(run) if options["json"] else self.transcript(run)
        return self.carry_on(self.worked(run, show), show, options)

    def started(self, user: User, options: dict[str, Any], limits: Limits) -> AgentRun:
        """The run, queued: alone, or as the first turn of a conversation with the assistant
        `--assistant` names (one the user may use; refused, nothing is stored)."""
        task, model, named = options["task"], options["model"], options["assistant"]
        # The model asked for, which the person's groups must allow (start_run refuses it
        # otherwise), else the assistant's, else the first the site offers that they allow.
        default = partial(chat_model, None, "", None, rights_of(user))
        if not named:
            return start_run(user, task, model=model or default(), limits=limits)
        assistant = find_for(user, named)
        if assistant is None:
            raise InvalidTask(
                f"No assistant {named!r} you may use (archived, not shared with you, or never "
                "made). Name one by its name or id (the Assistants page lists them)."
            )
        with transaction.atomic():
            conversation = Conversation.objects.create(owner=user, assistant=assistant)
            return start_run(
                user,
                task,
                model=model or assistant.model or default(),
                limits=limits,
                conversation=conversation,
            )

    def worked(self, run: AgentRun, show: Callable[[Event], None]) -> AgentRun:
        """The queued run worked here until it ends or waits for a decision."""
        with cancel_on_interrupt(self.stderr.write) as stop_requested:
            try:
                return execute_run(
                    run, on_event=show, stop_requested=stop_requested, sandbox=self.sandbox
                )
            except RunNotQueued as taken:  # decided on the page meanwhile: a worker took it
                raise CommandError(str(taken)) from None

    def carry_on(
        self, run: AgentRun, show: Callable[[Event], None], options: dict[str, Any]
    ) -> AgentRun:
        """While the run waits, the calls it waits on are decided here, and it is worked on;
        left waiting (nobody here to decide), it is returned as it is, and how to decide it is
        told on stderr."""
        while run.status == RunStatus.AWAITING_APPROVAL:
            if not self.decided(run, show, yes=options["yes"], events_on_stdout=options["json"]):
                self.stderr.write(how_to_decide(run))
                return run
            run.refresh_from_db()
            if run.status != RunStatus.QUEUED:  # it ended meanwhile (a Stop on its page)
                return run
            run = self.worked(run, show)
        return run

    def decided(
        self, run: AgentRun, show: Callable[[Event], None], *, yes: bool, events_on_stdout: bool
    ) -> bool:
        """Whether every call the run waits on was decided here: all approved (`--yes`), or
        each asked about in the terminal. False with no terminal, or once its input ends.
        Ctrl-C while asking exits, the run still waiting for what was not decided."""
        choose: Chooser
        if yes:
            choose, refused = approve, self.refused_approval
        elif sys.stdin.isatty():
            terminal = self.terminal(events_on_stdout)
            choose, refused = terminal.choose, terminal.refused
        else:
            return False
        try:
            decide_here(run, choose, refused=refused, then=show)
        except LeftWaiting:
            return False
        except KeyboardInterrupt:
            run.refresh_from_db()
            self.stderr.write("\n" + how_to_decide(run))
            raise SystemExit(STOPPED_ASKING) from None
        return True

    def terminal(self, events_on_stdout: bool) -> Terminal:
        """The person at this terminal, asked where they see it: not into stdout's events (or
        its file, when stdout is not the terminal)."""
        out = self.stdout if self.stdout.isatty() and not events_on_stdout else self.stderr

        def write(text: str, ending: str | None = None) -> None:
            out.write(text, style_func=unstyled, ending=ending)  # stderr's is an error's red

        return Terminal(read=self.read_line, write=write, editor=os.environ.get("EDITOR", ""))

    def read_line(self) -> str:
        self.stdout.flush()
        self.stderr.flush()
        return sys.stdin.readline()

    def refused_approval(self, why: str) -> None:
        raise CommandError(f"--yes could not approve a call: {why}")

    def resume(self, options: dict[str, Any]) -> AgentRun:
        """The run goes on in this process as a worker would take it, printing what follows."""
        given = [f"--{name}" for name in ("user", "model", "max_iterations") if options[name]]
        if options["task"] is not None or given:
            asked = ", ".join(["a task"] * (options["task"] is not None) + given)
            raise CommandError(
                f"--resume continues a run as it was: leave out {asked}.", returncode=USAGE_ERROR
            )
        run_id = options["resume"]
        run = AgentRun.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"No run {run_id}.", returncode=USAGE_ERROR)
        show = self.json_line(run) if options["json"] else self.transcript(run)
        if run.status == RunStatus.AWAITING_APPROVAL:  # it is not continued: it is decided
            if not options["json"]:
                count = counted(waiting_count(run), "tool call")
                self.stdout.write(
                    terminal_safe(f"Run {run.pk} waits for a decision on {count}: {run.task}")
                )
            return self.carry_on(run, show, options)
        if run.status == RunStatus.QUEUED and run.job_id is None:
            # Queued for a runagent that stopped before working it (decided, say): no worker
            # will take it, so this one does.
            if not options["json"]:
                self.stdout.write(terminal_safe(f"Taking up run {run.pk} (queued): {run.task}"))
            return self.carry_on(self.worked(run, show), show, options)
        if end_if_abandoned(run.pk, RunStatus.INTERRUPTED, process_gone(run.worker)):
            run.refresh_from_db()  # its process is gone: it ended interrupted, and goes on here
        if run.log_pruned_at is not None:
            raise CommandError(
                f"Run {run_id} cannot continue: its log was pruned on "
                f"{run.log_pruned_at:%Y-%m-%d} (LOOP_KEEP_EVENTS_DAYS).",
                returncode=USAGE_ERROR,
            )
        if not run.can_continue:
            raise CommandError(
                f"Run {run_id} cannot continue: it is {run.status}. Only a run that halted, was "
                "interrupted or failed because the model did not answer can go on.",
                returncode=USAGE_ERROR,
            )
        if not options["json"]:
            self.stdout.write(f"Continuing run {run.pk} ({run.status}): {run.task}")
        with cancel_on_interrupt(self.stderr.write) as stop_requested:
            try:
                run = resume_here(
                    run, on_event=show, stop_requested=stop_requested, sandbox=self.sandbox
                )
            except (InvalidTask, ModelUnavailable) as error:
                raise CommandError(
                    f"Run {run_id} cannot continue: {error}", returncode=USAGE_ERROR
                ) from None
        return self.carry_on(run, show, options)

    def limits(self, max_iterations: int | None) -> Limits:
        if max_iterations is None:
            return default_limits()
        if max_iterations < 1:
            raise CommandError("--max-iterations must be at least 1.", returncode=USAGE_ERROR)
        return default_limits(max_iterations=max_iterations)

    def user(self, username: str | None) -> User:
        users = get_user_model()
        if username is None:
            user, created = users.objects.get_or_create(
                defaults=None, **{users.USERNAME_FIELD: CLI_USER}
            )
            if created:
                user.set_unusable_password()
                user.save()
            return user
        try:
            return users.objects.get_by_natural_key(username)
        except users.DoesNotExist:
            raise CommandError(
                f"No user named {username!r}. Create it (manage.py createsuperuser), or leave "
                f"out --user to run as {CLI_USER!r}.",
                returncode=USAGE_ERROR,
            ) from None

    def json_line(self, run: AgentRun) -> Any:
        def write(event: Event) -> None:
            line = {"run": run.pk, "kind": event.kind, **event.as_dict()}
            if isinstance(event, RunFinished):
                line |= cost_fields(spend_of_run(run.pk))
                if quotas := standings(run.user_id):
                    line["quota"] = [quota_of(standing) for standing in quotas]
            self.stdout.write(json.dumps(line))
            self.stdout.flush()

        return write

    def transcript(self, run: AgentRun) -> Any:
        def write(event: Event) -> None:
            # What it cost, read from the ledger once the run ended.
            cost = cost_text(spend_of_run(run.pk)) if isinstance(event, RunFinished) else ""
            lines = describe(event, run.pk, verbose=self.verbose, cost=cost)
            if isinstance(event, RunFinished):
                lines += [quota_line(standing) for standing in standings(run.user_id)]
            for line in lines:
                self.stdout.write(terminal_safe(line))
            self.stdout.flush()

        return write


def quota_line(standing: Standing) -> str:
    """A quota's standing as the closing lines say it."""
    left = amount_in_words(standing.limit.measure, standing.remaining, standing.limit.currency)
    return (
        f"Quota ({standing.limit.source}): {left} left of {standing.limit.in_words()}; "
        f"resets at {moment_in_words(standing.resets_at)}."
    )


def quota_of(standing: Standing) -> dict[str, Any]:
    """A quota's standing as the --json end event carries it."""
    limit = standing.limit
    return {
        "measure": limit.measure.value,
        "limit": str(limit.amount),
        "used": str(standing.used),
        "remaining": str(standing.remaining),
        "currency": limit.currency if limit.measure == Measure.COST else "",
        "period": limit.period.value,
        "rolling": limit.rolling,
        "source": limit.source,
        "reached": standing.reached,
        "resets_at": standing.resets_at.isoformat(),
    }


def unstyled(text: str) -> str:
    return text


def how_to_decide(run: AgentRun) -> str:
    """What to do about a run this process leaves waiting, or decided but not yet worked."""
    if run.status == RunStatus.QUEUED:
        return (
            f"Run {run.pk} is decided but not worked yet: `manage.py runagent --resume {run.pk}` "
            "takes it up."
        )
    count = counted(waiting_count(run), "tool call")
    here = f"manage.py runagent --resume {run.pk}"
    page = (
        f"on its page, {reverse('chat:conversation', args=[run.conversation_id])}, or "
        if run.conversation_id is not None
        else ""
    )
    return (
        f"Run {run.pk} waits for a decision on {count}, not run yet. Decide {page}in a "
        f"terminal with `{here}` (add --yes to approve every call)."
    )


def describe(event: Event, run_id: int, *, verbose: bool = False, cost: str = "") -> list[str]:
    """How an event reads in a terminal; `cost`: the run's, in words, for its end ("": none)."""
    match event:
        case ModelReplied() if event.reasoning:
            return thought(event, verbose) + describe(
                dataclasses.replace(event, reasoning=""), run_id
            )
        case RunStarted():
            shown = (
                event.model if event.model == event.provider else f"{event.provider} {event.model}"
            )
            asked = (
                ("Your instructions", event.person_instructions),
                ("The conversation's instructions", event.conversation_instructions),
            )
            said = [f"{whose}: {excerpt(text, LINE_CHARS)}" for whose, text in asked if text]
            return [f"Task: {event.task}", f"Model: {shown}", *said]
        case MemoriesRecalled():
            count = len(event.memories)
            lines = [f"Recalled {count} {'memory' if count == 1 else 'memories'}:"]
            return lines + [recalled(memory) for memory in event.memories]
        case ModelReplied() if event.text and event.tool_calls:
            return [f"step {event.step}  model: {excerpt(event.text, LINE_CHARS)}"]
        case ToolCallStarted():
            return [f"step {event.step}  {event.tool} {excerpt(event.arguments, LINE_CHARS)}"]
        case ToolCallFinished():
            took = f"{event.tool} {event.status} in {event.duration:.3f}s"
            return [f"        {took}: {excerpt(event.text, LINE_CHARS)}"]
        case BreakerTripped():
            return [f"Circuit breaker tripped on {event.tool} ({event.reason})."]
        case RunHalted():
            return [f"Halted: {event.detail}"]
        case PersonSaid():
            return [f"You sent it: {excerpt(event.text, LINE_CHARS)}"]
        case ApprovalRequested():
            why = f": {event.why}" if event.why else ""
            return [f"step {event.step}  {event.tool} waits for a decision{why}"]
        case ApprovalDecided():
            by = f" by {event.by}" if event.by else ""
            decided = DECIDED.get(event.decision, event.decision)
            why = f": {excerpt(event.reason, LINE_CHARS)}" if event.reason else ""
            return [f"step {event.step}  {event.tool} {decided}{by}{why}"]
        case RunResumed():
            # Whoever typed `runagent --resume` asked for a continue.
            text = resumed_text(event.reason, event.by, who=OWNERS_WHO)
            return [f"{text} (attempt {event.attempt})."]
        case RunFinished():
            return finished(event, run_id, cost)
    return []


def thought(event: ModelReplied, verbose: bool) -> list[str]:
    """A reasoning model's thinking: one line, or whole with -v 2."""
    if verbose:
        return [f"step {event.step}  reasoning:", *event.reasoning.strip().splitlines()]
    return [f"step {event.step}  reasoning: {excerpt(event.reasoning, 100)}"]


def recalled(memory: RecalledMemory) -> str:
    parts = ", ".join(f"{name} {value:.2f}" for name, value in memory.parts.items())
    text = excerpt(memory.text, 80)
    return f"  memory {memory.id} (score {memory.score:.2f}: {parts}): {text}"


def finished(event: RunFinished, run_id: int, cost: str = "") -> list[str]:
    """The answer, then the closing line: what the run did and what it cost (the ledger's sum
    of its turns, every attempt's)."""
    lines = ["", "Answer:", event.answer or "(none)", ""]
    if event.error:
        lines[-1:-1] = ["", f"Error: {event.error}"]
    tokens = event.prompt_tokens + event.completion_tokens
    outcome = event.status + (f" ({event.halt_reason})" if event.halt_reason else "")
    lines.append(
        f"Run {run_id} {outcome} after {counted(event.iterations, 'model turn')}, "
        f"{counted(event.tool_calls, 'tool call')}, {counted(tokens, 'token')}, "
        f"{cost + ', ' if cost else ''}{event.duration:.2f}s."
    )
    return lines


def cost_fields(spend: Spend) -> dict[str, Any]:
    """A run's cost as its JSON end says it: a decimal string and its currency, or null and
    `price_unknown` (a turn had no price, or there was none to price)."""
    cost, currency = single_cost(spend)
    if spend.turns == 0:  # no model turn: nothing to pay
        return {"cost": "0", "currency": None, "price_unknown": False}
    if cost is None:
        return {"cost": None, "currency": None, "price_unknown": True}
    return {"cost": amount_text(cost), "currency": currency, "price_unknown": False}


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


@contextmanager
def cancel_on_interrupt(warn: Callable[[str], None]) -> Iterator[StopSource]:
    """Ctrl-C or SIGTERM cancels the run cleanly (it is recorded), mid-step as a worker's Stop
    does: the run's watcher reads the source this yields. A second Ctrl-C stops at once.

    The handler only raises a flag: it runs in the main thread, between any two of its
    bytecodes, where interrupting the run itself (a lock, its hooks) could deadlock."""
    requested = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        requested.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        warn("Cancelling the run (Ctrl-C again to stop at once)...")

    def asked() -> StopReason | None:
        return StopReason.CANCEL if requested.is_set() else None

    previous = {number: signal.signal(number, interrupt) for number in STOP_SIGNALS}
    try:
        yield asked
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
