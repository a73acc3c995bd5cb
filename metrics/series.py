"""The series each process counts as it hears runs' events (metrics.heard): counters and
histograms of prometheus-client, kept in files of the site's metrics directory, so whichever web
process is scraped adds up every process's (metrics.multiprocess). Imported only once that
directory is chosen: a metric's first value opens its file."""

from prometheus_client import Counter, Histogram

# A model's turn: from a quick local model's tenth of a second to a slow provider's minutes.
TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
# A tool call: a file read's milliseconds to run_code's or a web search's timeout.
TOOL_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A run's wait in the queue: NOTIFY hands it over in milliseconds; a full site makes it wait.
PICKUP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

RUNS_STARTED = Counter(
    "loop_runs_started", "Runs that started (their first event), per model.", ["provider", "model"]
)
RUNS_FINISHED = Counter(
    "loop_runs_finished",
    "Runs that ended, by status, and why when the status alone does not say (the halt's reason"
    ' or the end\'s cause; "" otherwise).',
    ["status", "reason"],
)
PICKUP = Histogram(
    "loop_run_pickup_seconds",
    "From a run's creation (queued) to a worker taking it up for the first time.",
    buckets=PICKUP_BUCKETS,
)
TURN = Histogram(
    "loop_model_turn_seconds",
    "How long the model took to reply to one turn, its client's retries included.",
    ["provider", "model"],
    buckets=TURN_BUCKETS,
)
MODEL_ERRORS = Counter(
    "loop_model_errors",
    'Model failures: "retried" for each failed attempt its client tried again, "failed" for a'
    " run the model ended (down, or too slow for the run's deadline).",
    ["provider", "model", "outcome"],
)
TOKENS = Counter(
    "loop_model_tokens",
    "Tokens of model turns, by kind: prompt, completion, and cached (the part of the prompt read"
    " from the provider's cache, also counted in prompt).",
    ["provider", "model", "kind"],
)
COST = Counter(
    "loop_model_cost",
    "What model turns cost, in the price table's currency (turns of models with no price are"
    " not counted here: see loop_model_unpriced_turns_total).",
    ["model", "currency"],
)
UNPRICED = Counter(
    "loop_model_unpriced_turns", "Model turns of a model with no price: cost unknown.", ["model"]
)
TOOL_CALLS = Counter(
    "loop_tool_calls", "Tool calls that finished, by tool and status.", ["tool", "status"]
)
TOOL_SECONDS = Histogram(
    "loop_tool_call_seconds", "How long a tool call took, by tool.", ["tool"], buckets=TOOL_BUCKETS
)
BREAKER_TRIPS = Counter(
    "loop_breaker_trips", "Circuit breaker trips that halted a run, by reason.", ["reason"]
)
RESUMES = Counter("loop_run_resumes", "Runs taken up again from their log, by reason.", ["reason"])
APPROVALS_REQUESTED = Counter(
    "loop_approvals_requested", "Tool calls that asked their person's decision, by tool.", ["tool"]
)
