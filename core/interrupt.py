"""How a run is told to stop from outside: cancelled by a person, or handed back by its worker.

Plain Python. Whoever works the run (a worker thread watching procrastinate's abort requests, a
signal handler, a test) calls `Interrupt.set(reason)` from any thread; the loop sees it at its next
check, and a step that may take long (a model turn, a rate-limit wait, the mock's latency) waits
on it, so it is abandoned at once instead of being waited out. Hooks (such as killing the run's
sandboxes) run once, in the thread that set it.
"""

import contextvars
import logging
import queue
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import ClassVar, ParamSpec, TypeVar

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


class StopReason(StrEnum):
    CANCEL = "cancel"  # someone asked the run to stop: it ends cancelled
    HAND_BACK = "hand_back"  # its worker is stopping: another one resumes it


class Interrupted(Exception):
    """A step was abandoned because the run was interrupted."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(f"the run was interrupted: {reason}")
        self.reason = reason


class Interrupt:
    """A one-shot stop signal with its reason; the first reason set wins, later ones are ignored
    (a run handed back and then cancelled is still handed back: its next worker sees the cancel).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._reason: StopReason | None = None
        self._hooks: list[Callable[[], object]] = []
        self._waiters: set[threading.Event] = set()

    @property
    def reason(self) -> StopReason | None:
        return self._reason

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking as soon as it is set; True if it is set."""
        return self._event.wait(timeout)

    def set(self, reason: StopReason) -> bool:
        """Interrupt the run; True if this call did it (False: it already was interrupted).
        The hooks run here, once, in this thread; a failing hook does not stop the others."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self._event.set()
            hooks, self._hooks = self._hooks, []
            waiters = set(self._waiters)
        for waiter in waiters:
            waiter.set()
        for hook in hooks:
            _run_hook(hook)
        return True

    def on_set(self, hook: Callable[[], object]) -> None:
        """Call `hook()` when the run is interrupted; at once, here, if it already is."""
        with self._lock:
            if self._reason is None:
                self._hooks.append(hook)
                return
        _run_hook(hook)

    def raise_if_set(self) -> None:
        if self._reason is not None:
            raise Interrupted(self._reason)

    def _add_waiter(self, waiter: threading.Event) -> None:
        with self._lock:
            self._waiters.add(waiter)
            if self._reason is not None:
                waiter.set()

    def _remove_waiter(self, waiter: threading.Event) -> None:
        with self._lock:
            self._waiters.discard(waiter)


def _run_hook(hook: Callable[[], object]) -> None:
    try:
        hook()
    except Exception:
        logger.exception("An interrupt hook failed")


# Python runs a signal's handler in the main thread only, and when the kernel hands the signal
# to another thread (any thread of the process may get it) the main thread runs it only once it
# wakes: so a call's wait wakes this often, or Ctrl-C would wait out a model call unheard.
SIGNAL_LOOK_SECONDS = 0.1

# How long a thread that made an interruptible call waits for the next before it ends.
CALLER_IDLE_SECONDS = 10.0


class _Caller:
    """A daemon thread that makes interruptible calls one at a time, and waits up to
    CALLER_IDLE_SECONDS for the next: a run asks its model once a step, and starting a thread for
    each call cost about as much as the rest of a step recorded in PostgreSQL (bench/loop.py).
    A call that was abandoned keeps its thread until it returns, however long that is."""

    _idle: ClassVar[list["_Caller"]] = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="interruptible", daemon=True).start()

    @classmethod
    def take(cls) -> "_Caller":
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def give(self, work: Callable[[], None], then: Callable[[], None]) -> None:
        """Run `work()`, then `then()` once this thread is free for another call."""
        self._jobs.put((work, then))

    def _serve(self) -> None:
        while True:
            try:
                work, then = self._jobs.get(timeout=CALLER_IDLE_SECONDS)
            except queue.Empty:
                with _Caller._lock:
                    if self in _Caller._idle:
                        _Caller._idle.remove(self)
                        return
                continue  # taken as it timed out: its call is on the way
            work()
            with _Caller._lock:
                _Caller._idle.append(self)
            then()


def interruptibly(
    fn: Callable[P, T], interrupt: Interrupt | None, /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(*args, **kwargs)`, or Interrupted as soon as `interrupt` is set.

    The call runs in a daemon thread (with this thread's context variables) so it can be
    abandoned: it goes on to its end unheard, its result or error dropped. Without an interrupt it
    simply runs here.
    """
    if interrupt is None:
        return fn(*args, **kwargs)
    interrupt.raise_if_set()
    woken = threading.Event()
    outcome: list[T] = []
    failure: list[BaseException] = []
    context = contextvars.copy_context()

    def call() -> None:
        try:
            outcome.append(context.run(fn, *args, **kwargs))
        except BaseException as error:  # handed to the caller, whatever it is
            failure.append(error)

    interrupt._add_waiter(woken)
    try:
        _Caller.take().give(call, woken.set)
        while not woken.wait(SIGNAL_LOOK_SECONDS):
            pass  # a signal's handler (runagent's Ctrl-C) runs as the wait ends
    finally:
        interrupt._remove_waiter(woken)
    if outcome:
        return outcome[0]
    if failure:
        raise failure[0]
    raise Interrupted(interrupt.reason or StopReason.CANCEL)
