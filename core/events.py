"""One dataclass per thing that happens in a run: the one schema every reader goes through.

The loop reports every event to a sink: the Django recorder persists it (then publishes it), the
CLI prints it, tests assert on it. `as_dict()` is the JSON stored on the run's event log, and
`event_from_dict()` reads it back as the same class, its fields typed: statuses and reasons as
their enums, recalled memories and tool calls as their dataclasses. A reader matches on the
classes (`case RunFinished():`) and never indexes the stored dicts, so a renamed field is an error
where it is read, not a silently empty card.
"""

import dataclasses
import functools
import types
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, ClassVar, Protocol, Union, get_args, get_origin

from core.llm import ToolCall
from core.recalled import RecalledMemory
from core.results import Remedy, ToolStatus


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    # It waits for its person's decision on a tool call (core.approval); no worker holds it.
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    HALTED = "halted"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class HaltReason(StrEnum):
    TOOL_FAILURES = "tool_failures"
    REPEATED_FAILED_CALL = "repeated_failed_call"
    IDENTICAL_CALLS = "identical_calls"
    ITERATION_CAP = "iteration_cap"
    DEADLINE = "deadline"
    TOKEN_BUDGET = "token_budget"  # noqa: S105 (a reason, not a secret)
    TOOL_CALL_BUDGET = "tool_call_budget"
    # A call waited for its person's decision longer than LOOP_APPROVAL_SECONDS: never run.
    NO_DECISION = "no_decision"
    # A quota of its person's over a period was reached (accounting/quotas.py): no summary turn,
    # which would spend more; it can be continued once the quota resets.
    QUOTA = "quota"


BREAKER_REASONS = frozenset(
    {HaltReason.TOOL_FAILURES, HaltReason.REPEATED_FAILED_CALL, HaltReason.IDENTICAL_CALLS}
)


class ResumeReason(StrEnum):
    WORKER_LOST = "worker_lost"  # the worker working it died; a live one took the run over
    HANDED_BACK = "handed_back"  # the worker working it was stopped and handed it back
    # The database restarted while it was worked; not counted against LOOP_MAX_RESUMES.
    DATABASE_RESTARTED = "database_restarted"
    CONTINUED = "continued"  # a person asked a run that had ended to go on
    DECIDED = "decided"  # its person decided every call it waited on (core.approval)


class ContinuedBy(StrEnum):
    """Who asked a run that had ended to go on (a log from before Loop recorded it says "")."""

    OWNER = "owner"  # the person whose run it is
    OPERATOR = "operator"  # an operator, from the console


class EndCause(StrEnum):
    """Why a run ended the way it did, when its status alone does not say: what a person can
    do about it follows from this (a run the model failed may be continued), never from the
    wording of its error."""

    MODEL_DOWN = "model_down"  # the model provider failed the run (it failed; it may go on)
    MODEL_TOO_SLOW = "model_too_slow"  # the provider did not answer before the run's deadline
    INTERNAL_ERROR = "internal_error"  # an error of Loop's own
    COULD_NOT_START = "could_not_start"  # its model or tools could not be set up
    TOO_MANY_RESUMES = "too_many_resumes"  # its worker stopped under it too often: Loop gave up
    # The model answered with what it can do (its help), not the task: it succeeded at nothing.
    ONLY_HELP = "only_help"


class AnswerSource(StrEnum):
    """Where a finished run's answer came from."""

    MODEL = "model"  # the model's final reply
    SUMMARY = "summary"  # the model's last turn of a halted run, asked to sum up
    PROGRESS = "progress"  # Loop's own account of what was done, or its note (nothing was done)
    # The model's help (what it can do), as its reply marked it: no answer to the task.
    HELP = "help"


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str]

    def __post_init__(self) -> None:
        # mypy takes a frozen dataclass's class for unhashable (its generated __hash__ is read
        # as the class's own); a class is hashable, and functools.cache keys on it.
        for name, ready, load in _loaders(type(self)):  # type: ignore[arg-type]
            value = getattr(self, name)
            if type(value) in ready:  # built from typed values (the loop's): as it is
                continue
            loaded = load(value)
            if loaded is not value:
                object.__setattr__(self, name, loaded)

    def as_dict(self) -> dict[str, Any]:
        """The stored JSON: enums as their values, an absent enum as "" (as stored always).
        Containers are copied, as `dataclasses.asdict` copies them, so what is stored or sent
        never changes with the loop's own lists; their strings and numbers, which cannot
        change, are not (asdict's deep copy of each was a third of the recorder's work a step)."""
        stored: dict[str, Any] = {}
        for name in _field_names(type(self)):  # type: ignore[arg-type]  # (as in __post_init__)
            value = getattr(self, name)
            # Most fields are a str, an int or a bool: stored as they are.
            stored[name] = value if type(value) in _AS_IS else _stored(_plain(value))
        return stored


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    kind = "run_started"
    task: str
    provider: str
    model: str
    messages: list[dict[str, Any]]
    limits: dict[str, Any]
    # What the person asked of every run and of this conversation's (core.instructions),
    # as the system prompt quotes them; "" for none (and in a log from before Loop had them).
    person_instructions: str = ""
    conversation_instructions: str = ""


@dataclass(frozen=True, kw_only=True)
class MemoriesRecalled(Event):
    kind = "memories_recalled"
    memories: list[RecalledMemory]


@dataclass(frozen=True, kw_only=True)
class ModelReplied(Event):
    kind = "model_replied"
    step: int
    text: str
    tool_calls: list[ToolCall]
    prompt_tokens: int
    completion_tokens: int
    recovered_error: str = ""
    reasoning: str = ""
    cut: bool = False  # the provider stopped the reply at the model's output limit
    # What went wrong on each attempt at this turn that the client retried.
    retried: list[str] = dataclasses.field(default_factory=list)
    help: bool = False  # the reply is the model's help, not an answer (Reply.help)
    # Of prompt_tokens, those read from the provider's prompt cache (0 in a log from before).
    cached_tokens: int = 0
    # How long the model took to reply, its client's retries included (0 in a log from before).
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted(Event):
    kind = "tool_call_started"
    step: int
    call_id: str
    tool: str
    arguments: str


class Decision(StrEnum):
    """What became of a tool call that waited for its person's decision."""

    APPROVE = "approve"  # run as the model asked
    EDIT = "edit"  # run with the arguments the person gave instead
    DENY = "deny"  # not run; the model reads the person's reason
    EXPIRED = "expired"  # nobody decided within LOOP_APPROVAL_SECONDS: not run, the run halts
    CANCELLED = "cancelled"  # the run was stopped while the call waited: not run


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested(Event):
    """A call of the model's `step` needs its person's decision before it runs (`why`: whose
    rule asks). `digest` binds a decision to exactly this call (core.approval.digest)."""

    kind = "approval_requested"
    step: int
    call_id: str
    tool: str
    arguments: str
    digest: str
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class ApprovalDecided(Event):
    """The decision on a call that waited: `arguments` are those it runs with (an edit's), `by`
    the username of whoever decided ("" when Loop did: an expiry), `reason` a denial's why."""

    kind = "approval_decided"
    step: int
    call_id: str
    tool: str
    decision: Decision
    arguments: str = ""
    reason: str = ""
    by: str = ""
    operator: bool = False  # decided by an operator, on the person's behalf (the console)


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished(Event):
    kind = "tool_call_finished"
    step: int
    call_id: str
    tool: str
    arguments: str
    status: ToolStatus
    text: str
    duration: float
    policy: str = ""
    truncated: bool = False
    stopped: bool = False  # it failed because the run was stopped while it ran (ToolResult)
    # It ran with arguments its person edited before approving (`arguments` are those).
    edited: bool = False
    remedy: Remedy | None = None  # what its person must do before the tool works again
    # The files it saved in its person's workspace (ToolResult.saved); [] in a log from before.
    saved: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class BreakerTripped(Event):
    """`failures`: each distinct error once, with the arguments it first came with and how many
    `times` it came (a log from before the count lists each failure, without `times`)."""

    kind = "breaker_tripped"
    step: int
    tool: str
    reason: HaltReason
    failures: list[dict[str, str]]


@dataclass(frozen=True, kw_only=True)
class RunHalted(Event):
    """A guard stopped the run. `summary_prompt` is what the model was asked for its last turn."""

    kind = "run_halted"
    step: int
    reason: HaltReason
    detail: str
    summary_prompt: str = ""


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    kind = "run_finished"
    status: RunStatus
    answer: str
    halt_reason: HaltReason | None = None
    error: str = ""
    iterations: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration: float = 0.0
    cut: bool = False  # the answer is the model's, stopped at its output limit
    answer_source: AnswerSource | None = None  # None in logs from before Loop recorded it
    ok_tool_calls: int = 0  # the tool calls that worked (status ok)
    cause: EndCause | None = None  # None: the status says it all, or a log from before causes
    # A halt's why in words (RunHalted's detail), for the run's end to say what happened.
    detail: str = ""
    # The tools it called that were on hold for review (Remedy.REVIEW), once each: a run that
    # wanted one did not do all it was asked, whatever its status says.
    on_hold: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class RunResumed(Event):
    """The run goes on from its log, at claim `attempt`. `note`, when set, is a user message the
    model reads (a person's Continue); `limits` are the run's limits from here on, absolute (a
    continue adds fresh budgets to what was already used)."""

    kind = "run_resumed"
    attempt: int = 0
    reason: ResumeReason = ResumeReason.WORKER_LOST
    lost_worker: str = ""
    note: str = ""
    limits: dict[str, Any] = dataclasses.field(default_factory=dict)
    by: ContinuedBy | None = None  # who asked a continued run to go on (stored "" when None)


@dataclass(frozen=True, kw_only=True)
class PersonSaid(Event):
    """A message the run's person sent while it worked ("Send now"), heard before the model's
    turn after `step`: the model reads it as the person's words. `message` is its id (a
    QueuedTask's), so it is heard once however often the run is resumed."""

    kind = "person_said"
    step: int
    message: int
    text: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        MemoriesRecalled,
        ModelReplied,
        ToolCallStarted,
        ToolCallFinished,
        BreakerTripped,
        RunHalted,
        RunFinished,
        RunResumed,
        PersonSaid,
        ApprovalRequested,
        ApprovalDecided,
    )
}


def event_from_dict(kind: str, data: dict[str, Any]) -> Event:
    return EVENT_TYPES[kind](**data)


@dataclass(frozen=True)
class Unreadable:
    """A stored event this version of Loop cannot load as its class (a kind or a field a later
    Loop wrote): a reader shows it as stored, or not at all, rather than failing."""

    kind: str
    data: dict[str, Any]

    @property
    def step(self) -> int:
        step = self.data.get("step", 0)
        return step if isinstance(step, int) else 0

    def as_dict(self) -> dict[str, Any]:
        return self.data


def loaded(kind: str, data: dict[str, Any]) -> Event | Unreadable:
    """The stored event as its class, or Unreadable if this version cannot load it."""
    try:
        return event_from_dict(kind, data)
    except (KeyError, TypeError):
        return Unreadable(kind, data)


Loader = Callable[[Any], Any]


@functools.cache
def _loaders(cls: type[Event]) -> tuple[tuple[str, frozenset[type], Loader], ...]:
    """How each typed field of `cls` is read from what the log stores, with the types of the
    values that need no reading (an enum field's members, and None where it may be None)."""
    loaders = []
    for field in dataclasses.fields(cls):
        if (load := _loader(field.type)) is not None:
            loaders.append((field.name, _ready(field.type), load))
    return tuple(loaders)


def _ready(annotation: Any) -> frozenset[type]:
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        inner = next(arg for arg in args if arg is not type(None))
        return _ready(inner) | {type(None)} if _ready(inner) else frozenset()
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return frozenset({annotation})
    return frozenset()


def _loader(annotation: Any) -> Loader | None:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType) and type(None) in args:
        inner = _loader(next(arg for arg in args if arg is not type(None)))
        return None if inner is None else functools.partial(_optional, inner)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return functools.partial(_member, annotation)
    if origin is list and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return functools.partial(_items, args[0])
    return None


def _optional(load: Loader, value: Any) -> Any:
    return None if value in (None, "") else load(value)


def _member(enum: type[Enum], value: Any) -> Any:
    """The member; a value this version does not know (a later Loop wrote it) stays its text."""
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        return value


def _items(cls: type, values: list[Any]) -> list[Any]:
    for value in values:
        if not isinstance(value, cls):
            return [value if isinstance(value, cls) else cls(**value) for value in values]
    return values


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


# The types whose values are stored as they are (exactly these: an enum's value is stored).
_AS_IS = frozenset({str, int, float, bool})


def _plain(value: Any) -> Any:
    """The value with its dataclasses as dicts and its lists, tuples and dicts copied."""
    kind: type = type(value)
    if kind in _AS_IS or value is None:
        return value
    if kind is list:
        return [_plain(item) for item in value]
    if kind is dict:
        return {_plain(key): _plain(item) for key, item in value.items()}
    if hasattr(kind, "__dataclass_fields__"):  # a dataclass's instance (its class is a type)
        return {name: _plain(getattr(value, name)) for name in _field_names(kind)}
    if isinstance(value, str | int | float | bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value


def _stored(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return "" if value is None else value


class EventSink(Protocol):
    def __call__(self, event: Event) -> None: ...
