"""What a worker loads before it takes its first run, so that run's first card comes as soon as
any later run's.

A cold process loads on the way of its first run what every later run finds loaded: the
embedder (recall embeds the task before the run's first step), the tools' specs (pydantic builds
each JSON schema once, some 0.8 s for the built-in tools on a busy machine, then cached: measured
with cProfile in a worker's first job), the modules of the run's path (the loop, the tools, the
model clients). Loaded here, at the worker's
start and before it fetches a job, a run sent meanwhile waits in the queue, which the page says
("Waiting for a worker…"), rather than "Working…" with nothing to show.
"""

import time


def warm_up() -> float:
    """Load what a run's first steps need; the seconds it took (a few ms once loaded: the worker
    calls it at each life's start, after the database came back too)."""
    began = time.monotonic()
    import agent.llm.factory  # noqa: F401 (the model clients, the mock among them)
    import engine.execution  # noqa: F401 (the loop, the recorder, the tools it binds)
    from agent.toolset import default_registry
    from memory.embedders import get_embedder

    default_registry().specs()
    get_embedder().embed(["What a person asks Loop."])
    return time.monotonic() - began
