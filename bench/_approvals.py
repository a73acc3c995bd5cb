"""The parts of `bench/load.py --approvals`: people who asked to decide before run_code runs, a
client that approves each call a set time after it asked, what the workers held while runs
waited, and the figures of the runs that waited and of those that never did.

The bench imports none of the project's code: the decisions are made by a Django process of the
site's own (`manage.py shell`), which calls approvals.decisions.decide as the run's owner, as the
chat's decide view does for a person.
"""

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench._stack import RunRow, Stack, Watched, percentile

DECIDER_APP = "bench-decider"

# Read by `manage.py shell -c`: one JSON line per call to approve, one answer line each.
DECIDER = """
import json, sys
from approvals.decisions import DecisionRefused, decide
from core.events import Decision
from agent.models import AgentRun
from approvals.waiting import CallDecision

print("decider ready", flush=True)
for line in sys.stdin:
    asked = json.loads(line)
    owner = AgentRun.objects.select_related("user").get(pk=asked["run"]).user
    decision = CallDecision(asked["call"], Decision.APPROVE, asked["digest"])
    try:
        decide(owner, asked["run"], [decision])
        print("decider approved", flush=True)
    except DecisionRefused as refused:
        print("decider refused", refused, flush=True)
"""


def ask_before_run_code(stack: Stack, usernames: list[str]) -> None:
    """These people ask to decide before their runs' run_code calls run (the settings page's
    "Ask me before running code"); the site asks about nothing (no LOOP_APPROVAL)."""
    script = (
        "import json\n"
        "from django.contrib.auth.models import User\n"
        "from approvals.models import ApprovalPreference\n"
        f"names = json.loads({json.dumps(json.dumps(usernames))})\n"
        "ApprovalPreference.objects.bulk_create(\n"
        "    ApprovalPreference(user=user, ask_run_code=True)\n"
        "    for user in User.objects.filter(username__in=names)\n"
        ")\n"
    )
    stack.manage("shell", "-c", script)


class Decider:
    """The site's own Django process, approving the calls it is given as their runs' owners."""

    def __init__(self, stack: Stack) -> None:
        self.process = subprocess.Popen(  # noqa: S603 (our own command line)
            [sys.executable, "manage.py", "shell", "-c", DECIDER],
            cwd=stack.project, env={**stack.env, "PGAPPNAME": DECIDER_APP},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stack.log("decider"),
            text=True, bufsize=1,
        )  # fmt: skip
        if self.answer() != "ready":
            raise SystemExit(f"the decider did not start; see {stack.var_dir}/decider.log")

    def answer(self) -> str:
        """The decider's next answer (lines without its prefix are other output, skipped)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("decider "):
                return line.removeprefix("decider ").strip()
        return "gone"

    def approve(self, request: "Request") -> str:
        assert self.process.stdin is not None
        asked = {"run": request.run_id, "call": request.call_id, "digest": request.digest}
        self.process.stdin.write(json.dumps(asked) + "\n")
        return self.answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(60)


@dataclass(frozen=True)
class Request:
    """A call waiting for its person's decision, as its audit row has it."""

    id: int
    run_id: int
    call_id: str
    digest: str
    asked_at: float


class Approver:
    """A client that approves every call waiting for a decision `after` seconds after it asked,
    as a person reading its card would, in a thread; refusals are kept with their reasons."""

    def __init__(self, stack: Stack, after: float) -> None:
        self.stack = stack
        self.after = after
        self.decider = Decider(stack)
        self.seen: set[int] = set()
        self.due: list[Request] = []
        self.approved = 0
        self.refused: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.approve_when_due, daemon=True)

    def approve_when_due(self) -> None:
        with self.stack.new_connection() as db:
            while not self.stopped.wait(0.05):
                self.due.extend(self.new_requests(db))
                self.due.sort(key=lambda request: request.asked_at)
                while self.due and self.due[0].asked_at + self.after <= time.time():
                    answer = self.decider.approve(self.due.pop(0))
                    if answer == "approved":
                        self.approved += 1
                    else:
                        self.refused.append(answer)

    def new_requests(self, db: psycopg.Connection[Any]) -> list[Request]:
        rows = db.execute(
            "SELECT id, run_id, call_id, digest, extract(epoch FROM created_at) "
            "FROM agent_approvalrequest WHERE decision = ''"
        ).fetchall()
        fresh = [Request(*row[:4], float(row[4])) for row in rows if row[0] not in self.seen]
        self.seen.update(request.id for request in fresh)
        return fresh

    def __enter__(self) -> "Approver":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()
        self.decider.close()


class SlotSampler:
    """Every 0.1 s, in a thread: how many runs were being worked (`running`, a worker slot each)
    and how many waited for a decision (`awaiting_approval`), at the same moment."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.samples: list[tuple[int, int]] = []  # (running, waiting)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        with self.stack.new_connection() as db:
            while not self.stopped.wait(0.1):
                (counts,) = db.execute(
                    "SELECT count(*) FILTER (WHERE status = 'running'), "
                    "count(*) FILTER (WHERE status = 'awaiting_approval') "
                    "FROM agent_agentrun WHERE status IN ('running', 'awaiting_approval')"
                ).fetchall()
                self.samples.append(counts)

    def __enter__(self) -> "SlotSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def line(self, capacity: int) -> str:
        waited = [(running, waiting) for running, waiting in self.samples if waiting]
        if not waited:
            return "  no run was seen waiting for a decision"
        most_waiting = max(waiting for _, waiting in waited)
        most_worked = max(running for running, _ in waited)
        together = max(running + waiting for running, waiting in waited)
        return (
            f"  slots: up to {most_waiting} runs waited at once; while any waited, up to "
            f"{most_worked} others were worked at once, waiting and worked together up to "
            f"{together} (the workers have {capacity} slots; sampled every 0.1 s)"
        )


@dataclass(frozen=True)
class Decided:
    """One approved call: when it asked, was decided, its run was claimed again, and it started."""

    asked_at: float
    decided_at: float
    claimed_at: float | None  # the run's RunResume row for the decision
    started_at: float | None  # its ToolCallStarted event

    @property
    def to_start(self) -> float | None:
        return None if self.started_at is None else self.started_at - self.decided_at

    @property
    def to_claim(self) -> float | None:
        return None if self.claimed_at is None else self.claimed_at - self.decided_at


def decisions(stack: Stack, run_ids: list[int]) -> list[Decided]:
    """The runs' approved calls, with the moments between their decision and their start (one
    clock: the site stamps every one of them on this machine)."""
    rows = stack.query(
        """
        SELECT extract(epoch FROM a.created_at), extract(epoch FROM a.decided_at),
               (SELECT extract(epoch FROM min(r.created_at)) FROM agent_runresume r
                 WHERE r.run_id = a.run_id AND r.reason = 'decided'
                   AND r.created_at >= a.decided_at),
               (SELECT extract(epoch FROM min(e.created_at)) FROM agent_runevent e
                 WHERE e.run_id = a.run_id AND e.kind = 'tool_call_started'
                   AND e.data->>'call_id' = a.call_id)
        FROM agent_approvalrequest a
        WHERE a.run_id = ANY(%s) AND a.decision = 'approve'
        """,
        (run_ids,),
    )
    return [Decided(*(None if value is None else float(value) for value in row)) for row in rows]


def decision_lines(label: str, decided: list[Decided]) -> list[str]:
    starts = [d.to_start for d in decided if d.to_start is not None]
    claims = [d.to_claim for d in decided if d.to_claim is not None]
    waits = [d.decided_at - d.asked_at for d in decided]
    if not decided:
        return [f"  {label}: no call was approved"]
    return [
        f"  {label}: {len(decided)} calls approved after waiting p50 {percentile(waits, 0.5):.2f} "
        f"s; decision -> call started p50 {ms(percentile(starts, 0.5))}, p99 "
        f"{ms(percentile(starts, 0.99))}, max {ms(max(starts, default=float('nan')))} "
        f"({len(decided) - len(starts)} never started); of which decision -> run claimed p50 "
        f"{ms(percentile(claims, 0.5))}, p99 {ms(percentile(claims, 0.99))}"
    ]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


@dataclass
class Side:
    """The figures of some of a round's runs: how fast they were worked, how soon picked up."""

    label: str
    runs: int
    finished: int
    per_minute: float
    pickups: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)  # started_at -> finished_at
    failed: int = 0  # not `succeeded` in the database
    unseen: int = 0  # the page's socket failed, or never showed the end

    def line(self) -> str:
        return (
            f"  {self.label:<40} {self.finished:>3}/{self.runs:<3} {self.per_minute:>8.1f} "
            f"{ms(percentile(self.pickups, 0.5)):>9} {ms(percentile(self.pickups, 0.99)):>9} "
            f"{percentile(self.ends, 0.5):>7.2f} s {percentile(self.ends, 0.99):>6.2f} s "
            f"{percentile(self.held, 0.5):>8.2f} s {self.failed:>6} {self.unseen:>6}"
        )


SIDE_HEADER = (
    f"  {'':<40} {'seen':>7} {'runs/min':>8} {'pickup50':>9} {'pickup99':>9} "
    f"{'e2e50':>9} {'e2e99':>8} {'start-end50':>10} {'failed':>6} {'unseen':>6}"
)


FAILED = RunRow("not found", 0.0, None, None, 0, 0, None)


def side(label: str, watched: list[Watched], rows: dict[int, RunRow], first_send: float) -> Side:
    """`watched`'s runs: per minute counted from the round's first send (every run of the round
    was sent at that moment) to the last of these whose end a page saw; `failed` as the database
    has them, `unseen` as their pages did; start-end is how long a run held a slot, and for a
    run that waited, its wait too."""
    finished = [seen for seen in watched if seen.finished_at]
    span = max((seen.finished_at for seen in finished), default=first_send) - first_send
    mine = [rows[seen.run_id] for seen in watched if seen.run_id in rows]
    return Side(
        label=label,
        runs=len(watched),
        finished=len(finished),
        per_minute=len(finished) / span * 60 if span > 0 else 0.0,
        pickups=[row.started_at - row.created_at for row in mine if row.started_at],
        ends=[seen.finished_at - seen.sent_at for seen in finished],
        held=[
            row.finished_at - row.started_at for row in mine if row.started_at and row.finished_at
        ],
        failed=sum(1 for seen in watched if rows.get(seen.run_id, FAILED).status != "succeeded"),
        unseen=sum(1 for seen in watched if seen.error or not seen.finished_at),
    )
