"""A model client's gate: a server that answers a few requests at a time is asked only when one
of this process's slots for it is free (engine.execution.taking_turns sizes the gate)."""

import threading
import time

from django.conf import settings

from core.interrupt import Interrupt
from core.llm import LLM, Message, ModelTimedOut, Reply, ToolSpec


class TakingTurns:
    """A model client that asks a server that answers a few requests at a time (Ollama,
    llama-server, one GPU) only when one of its slots is free. A request queued at the server
    instead counts against the client's timeout while it waits: it times out, is asked again at
    the back of the queue, and the server still works out the reply nobody reads (measured:
    about half the server's time with 16 runs, docs/security.md). Waiting here counts only
    against the run's own deadline, and a run that cannot get a turn in it halts on it."""

    # How often a wait for the gate looks whether the run was stopped.
    POLL = 0.2

    def __init__(self, llm: LLM, gate: threading.BoundedSemaphore) -> None:
        self.llm, self.gate = llm, gate
        self.provider, self.model = llm.provider, llm.model

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.wait_for_a_slot(deadline, interrupt)
        try:
            if interrupt is not None:
                interrupt.raise_if_set()  # stopped while it waited: nothing is asked
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            return self.llm.chat(messages, tools, timeout=left, interrupt=interrupt)
        finally:
            self.gate.release()

    def wait_for_a_slot(self, deadline: float | None, interrupt: Interrupt | None) -> None:
        while True:
            left = self.POLL if deadline is None else min(self.POLL, deadline - time.monotonic())
            if left > 0 and self.gate.acquire(timeout=left):
                return
            if interrupt is not None:
                interrupt.raise_if_set()
            if deadline is not None and time.monotonic() >= deadline:
                slots = settings.LOOP_OPENAI_CONCURRENCY
                raise ModelTimedOut(
                    f"The model server was busy with this worker's other runs (it is asked at "
                    f"most {slots} at a time, LOOP_OPENAI_CONCURRENCY) for all the time the run "
                    "had left."
                )
