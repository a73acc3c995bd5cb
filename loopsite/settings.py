"""Loop's settings, read from environment variables only (see docs/configuration.md).

DEBUG unset means local development with safe defaults. DEBUG=false means production: the values a
deployment must provide are required, and a missing or malformed one stops the start with its name.
"""

import hashlib
from datetime import timedelta
from pathlib import Path

import django_stubs_ext
from csp.constants import NONE, SELF
from django.core.management.utils import get_random_secret_key

from loopsite.database import Pool, database_settings
from loopsite.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
    require,
)

# ModelAdmin[Memory], Paginator[Model] and the like, written as their types say, at run time too.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("LOOP_VAR_DIR") or BASE_DIR / "var").resolve()

DEBUG = env_bool("DEBUG", default=True)
PRODUCTION = not DEBUG


def _development_secret_key() -> str:
    """A per-checkout key kept under var/, so local sessions survive restarts."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(get_random_secret_key())
    return path.read_text().strip()


if PRODUCTION:
    SECRET_KEY = env_str("SECRET_KEY")
    require("SECRET_KEY", SECRET_KEY, "when DEBUG is false (a long random string)")
    ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
    require("ALLOWED_HOSTS", ALLOWED_HOSTS, "when DEBUG is false (comma-separated host names)")
else:
    SECRET_KEY = env_str("SECRET_KEY") or _development_secret_key()
    ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "console",  # ahead of the admin: its admin templates override the admin's own
    "accounts.apps.LoopAdminConfig",  # django.contrib.admin; its password change counted by axes
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "procrastinate.contrib.django",
    "axes",
    "accounting",
    "rights",
    "assistants",
    "agent",
    "approvals",
    "engine",
    "metrics",
    "tracing",
    "notifications",
    "tools",
    "workspace",
    "memory",
    "accounts",
    "chat",
    "mcp_servers",
    "identity",
    "sharing",
    "ninja",  # the API's docs page, its Swagger UI served from static files (no CDN)
    "api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "loopsite.middleware.ContentSecurityPolicyMiddleware",
    "loopsite.middleware.DatabaseOutageMiddleware",  # above all that may read the database
    "loopsite.middleware.PrivatePagesMiddleware",
    "loopsite.middleware.UnreadableFormMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
]  # built sync under ASGI too, the request's code in one thread call (loopsite/handler.py)

ROOT_URLCONF = "loopsite.urls"
ASGI_APPLICATION = "loopsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "mcp_servers.context_processors.held_count",
                "accounts.theme.theme",
                "chat.navigation.navigation",
            ],
        },
    },
]

# Each process (daphne, a worker, a manage.py command) borrows its connections from a pool of at
# most LOOP_DB_POOL_SIZE sessions (0: no pool, a connection per thread); a thread waits at most
# LOOP_DB_POOL_TIMEOUT seconds for one, then fails saying so. docs/deploy.md sizes them.
LOOP_DB_POOL_SIZE = env_int("LOOP_DB_POOL_SIZE", 10)
LOOP_DB_POOL_TIMEOUT = env_float("LOOP_DB_POOL_TIMEOUT", 60.0) or 60.0
DATABASES = {
    "default": database_settings(
        env_str("DATABASE_URL"), VAR_DIR, Pool(LOOP_DB_POOL_SIZE, LOOP_DB_POOL_TIMEOUT)
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
# Every group name starts with this (agent.bus.group_for), so sites sharing a Redis database do not
# hear each other; empty: the database's name, read at use. Set, it also prefixes Redis's keys.
LOOP_CHANNEL_PREFIX = env_str("LOOP_CHANNEL_PREFIX")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub, a socket's own channel made even while Redis is away (see there).
            "BACKEND": "loopsite.channel_layer.PubSubChannelLayer",
            "CONFIG": {
                # A bound on each Redis call, so one that never answers fails (redis-py has none
                # by default).
                "hosts": [{"address": REDIS_URL, "socket_timeout": 10}],
                "prefix": LOOP_CHANNEL_PREFIX or "asgi",
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The run engine: Procrastinate on the same PostgreSQL (engine/tasks.py, docs/engine.md).
# `manage.py worker` works LOOP_WORKER_CONCURRENCY runs at once; a run whose worker stops sending
# heartbeats for LOOP_STALE_SECONDS is resumed by a live worker, at most LOOP_MAX_RESUMES times
# (a dead worker of the resuming worker's own host is found at once, by its pid). 10 s: an
# overloaded worker's heartbeat, due every 3.3 s, was never seen older than 4.7 s
# (bench/recovery.py --heartbeats, docs/engine.md).
LOOP_WORKER_CONCURRENCY = env_int("LOOP_WORKER_CONCURRENCY", 16)
LOOP_STALE_SECONDS = env_int("LOOP_STALE_SECONDS", 10)
LOOP_MAX_RESUMES = env_int("LOOP_MAX_RESUMES", 2)

# The model (see agent/llm/ and docs/configuration.md). No key: the keyless mock model.
GROQ_API_KEY = env_str("GROQ_API_KEY")
GROQ_BASE_URL = env_str("GROQ_BASE_URL")
LOOP_MODEL = env_str("LOOP_MODEL")
# The mock model waits this long per turn, as a real one would (load tests, demos); 0: no wait.
LOOP_MOCK_LATENCY_MS = env_int("LOOP_MOCK_LATENCY_MS", 0)
LOOP_GROQ_MODEL = env_str("LOOP_GROQ_MODEL", "openai/gpt-oss-120b")
# Sent only to models that take these values (agent.llm.groq.REASONING_MODELS).
LOOP_GROQ_REASONING_EFFORT = env_choice(
    "LOOP_GROQ_REASONING_EFFORT", "medium", ("low", "medium", "high")
)
LOOP_GROQ_TIMEOUT = env_int("LOOP_GROQ_TIMEOUT", 60)
LOOP_GROQ_MAX_RETRIES = env_int("LOOP_GROQ_MAX_RETRIES", 2)
# Any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter; docs/models.md).
# With a base URL and no GROQ_API_KEY, runs use LOOP_OPENAI_MODEL; the key is optional.
LOOP_OPENAI_BASE_URL = env_str("LOOP_OPENAI_BASE_URL")
LOOP_OPENAI_API_KEY = env_str("LOOP_OPENAI_API_KEY")
LOOP_OPENAI_MODEL = env_str("LOOP_OPENAI_MODEL")
# Sent as reasoning_effort only when set: many servers refuse parameters they do not know.
LOOP_OPENAI_REASONING_EFFORT = env_str("LOOP_OPENAI_REASONING_EFFORT")
# A local model on a CPU can take minutes for a long reply; the run's own deadline still bounds it.
LOOP_OPENAI_TIMEOUT = env_int("LOOP_OPENAI_TIMEOUT", 120)
LOOP_OPENAI_MAX_RETRIES = env_int("LOOP_OPENAI_MAX_RETRIES", 2)
# The most requests one worker sends to the OpenAI-compatible server at once (0: no limit). A server
# that answers one at a time (Ollama's OLLAMA_NUM_PARALLEL=1) wastes its time on replies nobody
# waits for when more queue in it than it can answer before their timeouts (docs/models.md).
LOOP_OPENAI_CONCURRENCY = env_int("LOOP_OPENAI_CONCURRENCY", 0)
# The models a person may pick from, per conversation (comma-separated names, as LOOP_MODEL takes
# them); empty: the one default model.
LOOP_MODELS = env_list("LOOP_MODELS", [])

# The bounds on every run (core.loop.Limits).
LOOP_TASK_MAX_CHARS = env_int("LOOP_TASK_MAX_CHARS", 10_000)
LOOP_MAX_ITERATIONS = env_int("LOOP_MAX_ITERATIONS", 10)
LOOP_RUN_SECONDS = env_int("LOOP_RUN_SECONDS", 600)
LOOP_RUN_TOKENS = env_int("LOOP_RUN_TOKENS", 200_000)
LOOP_RUN_TOOL_CALLS = env_int("LOOP_RUN_TOOL_CALLS", 50)
LOOP_BREAKER_FAILURES = env_int("LOOP_BREAKER_FAILURES", 3)
LOOP_BREAKER_IDENTICAL_CALLS = env_int("LOOP_BREAKER_IDENTICAL_CALLS", 3)
LOOP_PARALLEL_TOOL_CALLS = env_int("LOOP_PARALLEL_TOOL_CALLS", 4)
# Tools whose calls wait for the run's person's decision before they run (`tool=ask`, comma-
# separated; every other tool runs as the model asks: `auto`). Staff may set more in the console,
# a person may ask for more on their settings page. A call nobody decides on within
# LOOP_APPROVAL_SECONDS never runs: its run halts (docs/approvals.md).
LOOP_APPROVAL = env_str("LOOP_APPROVAL")
LOOP_APPROVAL_SECONDS = env_int("LOOP_APPROVAL_SECONDS", 24 * 60 * 60)

# MCP servers (docs/mcp.md). LOOP_MCP_SERVERS declares site servers as a JSON list of objects
# (name, url or command, headers, tools, auto, prefix, trust_hints); the console shows them
# read-only. A person may add servers of their own only on hosts LOOP_MCP_PERSONAL_HOSTS admits
# (host names, `*.example.com`, or `*` for any public host; empty: no personal servers). No
# server is reached at a loopback, private or link-local address unless its network is in
# LOOP_MCP_PRIVATE_NETWORKS (CIDRs), and never at a cloud metadata address. Credentials are
# sealed with LOOP_CREDENTIAL_KEYS (Fernet keys, comma-separated, the first seals; empty: a key
# derived from SECRET_KEY).
LOOP_MCP_SERVERS = env_str("LOOP_MCP_SERVERS")
LOOP_MCP_PERSONAL_HOSTS = env_list("LOOP_MCP_PERSONAL_HOSTS", [])
LOOP_MCP_PRIVATE_NETWORKS = env_list("LOOP_MCP_PRIVATE_NETWORKS", [])
LOOP_MCP_CALL_SECONDS = env_int("LOOP_MCP_CALL_SECONDS", 60)
LOOP_MCP_DISCOVERY_SECONDS = env_int("LOOP_MCP_DISCOVERY_SECONDS", 20)  # one listing's time
LOOP_MCP_LIST_EVERY_SECONDS = env_int("LOOP_MCP_LIST_EVERY_SECONDS", 900)  # the site's servers
LOOP_MCP_RESPONSE_BYTES = env_int("LOOP_MCP_RESPONSE_BYTES", 4 * 1024 * 1024)
LOOP_MCP_DESCRIPTION_CHARS = env_int("LOOP_MCP_DESCRIPTION_CHARS", 1000)
LOOP_MCP_TOOLS_PER_SERVER = env_int("LOOP_MCP_TOOLS_PER_SERVER", 200)
LOOP_CREDENTIAL_KEYS = env_list("LOOP_CREDENTIAL_KEYS", [])

# Tools (see tools/ and docs/configuration.md).
LOOP_WORKSPACES_DIR = Path(env_str("LOOP_WORKSPACES_DIR") or VAR_DIR / "workspaces").resolve()
LOOP_WORKSPACE_MAX_BYTES = env_int("LOOP_WORKSPACE_MAX_BYTES", 200_000_000)  # workspace.quota
LOOP_WORKSPACE_MAX_FILES = env_int("LOOP_WORKSPACE_MAX_FILES", 10_000)  # files and directories
# The most one uploaded file may hold (workspace/views.py); the workspace quota bounds them all.
LOOP_UPLOAD_MAX_BYTES = env_int("LOOP_UPLOAD_MAX_BYTES", 10 * 1024 * 1024)
# The most files one upload request may carry; its body may be this many uploads' worth.
LOOP_UPLOAD_MAX_FILES = env_int("LOOP_UPLOAD_MAX_FILES", 5)
LOOP_SANDBOX = env_str("LOOP_SANDBOX", "bubblewrap")


def sandbox_uid_base(workspaces: Path) -> int:
    """This site's own sandbox uid range, derived from its workspaces directory: the same on every
    start, and another site on the host (another directory) almost surely gets another, so no
    person of one site shares a uid, and with it a process budget, with a person of another. It
    lies above the ranges hosts hand out (accounts, subuids, systemd-nspawn's up to 1879048191)
    and leaves 2**27 user ids below 2**31 - 1."""
    first, room_for_users = 1_900_000_000, 2**27
    choices = 2**31 - 1 - room_for_users - first
    digest = hashlib.sha256(str(workspaces).encode()).digest()
    return first + int.from_bytes(digest[:8], "big") % choices


# As root, user N's snippets run as host uid (and gid) LOOP_SANDBOX_UID_BASE + N: a process budget
# of their own (numeric ids, no /etc/passwd entries). No host account may use that range.
LOOP_SANDBOX_UID_BASE = env_int("LOOP_SANDBOX_UID_BASE", sandbox_uid_base(LOOP_WORKSPACES_DIR))
LOOP_SANDBOX_PYTHON = env_str("LOOP_SANDBOX_PYTHON", "/usr/bin/python3")
LOOP_SANDBOX_WARM = env_bool("LOOP_SANDBOX_WARM", default=True)
# A snippet's processes together, with what it keeps in its tmpfs (sandbox.cgroups); a person's
# snippets running at once together; the cgroup under which Loop makes theirs ("": its own).
LOOP_SANDBOX_MEMORY_MB = env_int("LOOP_SANDBOX_MEMORY_MB", 512)
LOOP_SANDBOX_PERSON_MEMORY_MB = env_int("LOOP_SANDBOX_PERSON_MEMORY_MB", 1024)
LOOP_SANDBOX_CGROUP = env_str("LOOP_SANDBOX_CGROUP", "")
LOOP_SANDBOX_MAX_PROCESSES = env_int("LOOP_SANDBOX_MAX_PROCESSES", 64)
LOOP_TOOL_RESULT_MAX_CHARS = env_int("LOOP_TOOL_RESULT_MAX_CHARS", 16_000)
LOOP_WEB_SEARCH_BACKEND = env_str("LOOP_WEB_SEARCH_BACKEND", "tools.search.DdgsSearch")
LOOP_WEB_SEARCH_ENGINE = env_str("LOOP_WEB_SEARCH_ENGINE", "duckduckgo")

# Long-term memory (see memory/ and docs/configuration.md).
LOOP_EMBEDDER = env_str("LOOP_EMBEDDER", "memory.neural.MiniLMEmbedder")
LOOP_MEMORY_RECALL_K = env_int("LOOP_MEMORY_RECALL_K", 5)
# How long a forgetting record keeps the forgotten text (0: never kept, only the fact).
LOOP_FORGOTTEN_TEXT_DAYS = env_int("LOOP_FORGOTTEN_TEXT_DAYS", 0)
# Retention (agent/retention.py): the event log and tool outputs of a run that ended longer ago
# than this many days, and Procrastinate's finished jobs older than this, are pruned hourly; the
# accounting stays. 0: kept for ever.
LOOP_KEEP_EVENTS_DAYS = env_int("LOOP_KEEP_EVENTS_DAYS", 0)
LOOP_KEEP_JOBS_DAYS = env_int("LOOP_KEEP_JOBS_DAYS", 0)
LOOP_MEMORY_MIN_SIMILARITY = env_float("LOOP_MEMORY_MIN_SIMILARITY", None)  # None: the embedder's
LOOP_MEMORY_MERGE_SIMILARITY = env_float(
    "LOOP_MEMORY_MERGE_SIMILARITY", None
)  # None: the embedder's
LOOP_MEMORY_MAX_PER_USER = env_int("LOOP_MEMORY_MAX_PER_USER", 1000)
LOOP_MEMORY_HALF_LIFE_DAYS = env_float("LOOP_MEMORY_HALF_LIFE_DAYS", 30.0)
# Adds and edits on the Memories page, per person and minute (each embeds its text on the web).
LOOP_MEMORY_CHANGES_PER_MINUTE = env_int("LOOP_MEMORY_CHANGES_PER_MINUTE", 30)
# Searches of the Memories page, per person and minute (each embeds its words on the web).
LOOP_MEMORY_SEARCHES_PER_MINUTE = env_int("LOOP_MEMORY_SEARCHES_PER_MINUTE", 30)

# The API for programs (docs/api.md): requests a minute per key, and per person over all their
# keys; past either, 429 with Retry-After. Counted in the cache: per web process, unless
# LOOP_CACHE_URL names a Redis every web process shares.
LOOP_API_KEY_REQUESTS_PER_MINUTE = env_int("LOOP_API_KEY_REQUESTS_PER_MINUTE", 120)
LOOP_API_PERSON_REQUESTS_PER_MINUTE = env_int("LOOP_API_PERSON_REQUESTS_PER_MINUTE", 300)
# A run's event stream (api/events.py): how long one lasts before it closes (the client resumes
# with Last-Event-ID), how many one person may hold open in one web process, and how often a
# quiet one is kept alive, read again and its key checked.
LOOP_API_STREAM_SECONDS = env_int("LOOP_API_STREAM_SECONDS", 900)
LOOP_API_STREAMS_PER_PERSON = env_int("LOOP_API_STREAMS_PER_PERSON", 20)
LOOP_API_POLL_SECONDS = env_float("LOOP_API_POLL_SECONDS", 15.0)
LOOP_CACHE_URL = env_str("LOOP_CACHE_URL")
# Operators (docs/operators.md). The price table of the environment, JSON: per model's name as
# runs record it, prices per million tokens (accounting/prices.py); the console's prices too.
LOOP_PRICES = env_str("LOOP_PRICES")

# -- quotas and the send rate (accounting/quotas.py) --
# The site's quotas, every person's: "runs=50/day,tokens=2000000/month,cost=5/month" (empty:
# none); groups' and people's own are added in the console. The tightest applicable one wins.
LOOP_QUOTA = env_str("LOOP_QUOTA")
# Messages (sends, Continues, new versions, API run starts) a person may send a minute; 0: off.
LOOP_SEND_RATE_PER_MINUTE = env_int("LOOP_SEND_RATE_PER_MINUTE", 20)

# -- the chat's and runagent's cost (accounting) --
# Show each run's cost beside its tokens in the chat, and a conversation's total in its header
# (accounting/reports.py); off: people see no money.
LOOP_SHOW_COST = env_bool("LOOP_SHOW_COST", False)

# -- metrics (metrics/) --
# /metrics for Prometheus (docs/operators.md): off (404) unless a token is set; then only
# for "Authorization: Bearer <token>" or a client address in LOOP_METRICS_ALLOW (addresses or
# CIDRs, comma-separated; REMOTE_ADDR as the web server sees it, so a proxy's own address there
# lets through everyone the proxy serves).
LOOP_METRICS_TOKEN = env_str("LOOP_METRICS_TOKEN")
LOOP_METRICS_ALLOW = env_list("LOOP_METRICS_ALLOW", [])
# Where every process of the site (web and workers) keeps its counters, for any web process to
# add up at a scrape (prometheus-client's multiprocess mode; emptied by `make run` as it starts).
LOOP_METRICS_DIR = Path(env_str("PROMETHEUS_MULTIPROC_DIR") or VAR_DIR / "metrics")

# -- traces (tracing/) --
# OpenTelemetry traces of runs (tracing/; docs/operators.md): off unless an OTLP endpoint
# is set; the SDK reads the other OTEL_* variables itself. OTEL_SEMCONV_STABILITY_OPT_IN with
# gen_ai_latest_experimental selects the GenAI conventions' newer names. Prompts, answers and
# tool arguments and results are recorded only with LOOP_TRACE_CONTENT (default: what
# OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks of span content, else false).
LOOP_TRACES = not env_bool("OTEL_SDK_DISABLED", False) and bool(
    env_str("OTEL_EXPORTER_OTLP_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
)
OTEL_SEMCONV_STABILITY_OPT_IN = env_list("OTEL_SEMCONV_STABILITY_OPT_IN", [])
LOOP_TRACE_CONTENT = env_bool(
    "LOOP_TRACE_CONTENT",
    env_str("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT").lower()
    in {"true", "1", "yes", "on", "span_only", "span_and_event"},
)
if LOOP_TRACES:  # a caller's `traceparent` is the span a run it starts links to
    MIDDLEWARE.append("tracing.middleware.caller_trace_context")

# -- notifications (notifications/) --
# Mail and signed webhooks when a run waits, fails or ends (docs/operators.md).
# LOOP_SITE_URL: the site's address as people reach it, for the links mails and webhooks carry.
LOOP_SITE_URL = env_str("LOOP_SITE_URL", "http://127.0.0.1:8095").rstrip("/")
# A run that ends after this long is "long": its person may be mailed when it ends.
LOOP_NOTIFY_LONG_RUN_SECONDS = env_int("LOOP_NOTIFY_LONG_RUN_SECONDS", 120)
# Whether people may add webhooks of their own (operators' site webhooks are always allowed).
LOOP_PERSON_WEBHOOKS = env_bool("LOOP_PERSON_WEBHOOKS", default=False)
# The private networks (CIDRs) people's webhooks may reach; none by default (public only).
LOOP_WEBHOOK_PRIVATE_NETWORKS = env_list("LOOP_WEBHOOK_PRIVATE_NETWORKS", [])
# The delivery log keeps a delivery (and its attempts) this many days after it was made.
LOOP_KEEP_DELIVERIES_DAYS = env_int("LOOP_KEEP_DELIVERIES_DAYS", 30)
# Seconds between a failed delivery and its next attempt, one number per retry: about a day.
LOOP_WEBHOOK_RETRY_SECONDS = [
    int(seconds)
    for seconds in env_list(
        "LOOP_WEBHOOK_RETRY_SECONDS", ["5", "30", "120", "600", "3600", "10800", "21600", "43200"]
    )
]
if LOOP_CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": LOOP_CACHE_URL,
            "KEY_PREFIX": LOOP_CHANNEL_PREFIX or "loop",
        }
    }

# Logins and the chat (see docs/chat.md).
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"
LOOP_SIGNUP = env_choice("LOOP_SIGNUP", "approve", ("approve", "open", "off"))
LOOP_SIGNUP_PER_HOUR = env_int("LOOP_SIGNUP_PER_HOUR", 5)  # sign-ups asked for, per client address
# A person's export of their data (accounts.exports): one at a time per person, one started per
# LOOP_EXPORT_INTERVAL_SECONDS per person (0: no limit), LOOP_EXPORTS_AT_ONCE on the whole site.
LOOP_EXPORT_INTERVAL_SECONDS = env_int("LOOP_EXPORT_INTERVAL_SECONDS", 300)
LOOP_EXPORTS_AT_ONCE = env_int("LOOP_EXPORTS_AT_ONCE", 2)
# Password resets per client address and per e-mail address asked about, in an hour
# (accounts.resets): past the first, the page says so; past the second, no more mail is sent.
LOOP_PASSWORD_RESETS_PER_HOUR = env_int("LOOP_PASSWORD_RESETS_PER_HOUR", 5)

# Mail (password resets, approved sign-ups): Django's SMTP settings. Unset EMAIL_HOST: mail is
# printed by the web process (the console backend), as `make run` says.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)  # STARTTLS, usually on port 587
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Loop <loop@localhost>")

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # counts failed logins, locks out; first, as axes asks
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# Loop for an organisation (docs/organisations.md). What a person in no group with rights may use
# (rights/effective.py): `all` (everything the site offers) or `none` (no model, no tool).
LOOP_UNGROUPED_RIGHTS = env_choice("LOOP_UNGROUPED_RIGHTS", "all", ("all", "none"))
# >>> rights settings
# Each request reads a person's rights once (rights/middleware.py), after authentication.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "rights.middleware.RightsPerRequest",
)
# <<< rights settings
# >>> identity settings
# Sign-in through the organisation's OpenID Connect provider (identity/, docs/organisations.md),
# with mozilla-django-oidc doing state, nonce and PKCE; identity/ adds discovery and the ID
# token's issuer and audience. Without LOOP_OIDC_ISSUER there is no provider: no backend, no URLs,
# no button. identity/checks.py refuses a malformed configuration (`manage.py check`).
LOOP_OIDC_ISSUER = env_str("LOOP_OIDC_ISSUER").rstrip("/")
LOOP_OIDC_CLIENT_ID = env_str("LOOP_OIDC_CLIENT_ID")
LOOP_OIDC_CLIENT_SECRET = env_str("LOOP_OIDC_CLIENT_SECRET")
LOOP_OIDC_NAME = env_str("LOOP_OIDC_NAME", "your organisation")
# offline_access: the provider gives a refresh token, which the re-check presents to learn whether
# the person is still admitted (identity/deprovisioning.py).
LOOP_OIDC_SCOPES = env_str("LOOP_OIDC_SCOPES", "openid email profile offline_access")
LOOP_OIDC_AUTH_PARAMS = env_str("LOOP_OIDC_AUTH_PARAMS")  # extra query, e.g. access_type=offline
LOOP_OIDC_USERNAME_CLAIM = env_str("LOOP_OIDC_USERNAME_CLAIM", "preferred_username")
LOOP_OIDC_GROUPS_CLAIM = env_str("LOOP_OIDC_GROUPS_CLAIM", "groups")
LOOP_OIDC_GROUPS = env_list("LOOP_OIDC_GROUPS", [])  # the groups the provider may set
LOOP_OIDC_STAFF_GROUP = env_str("LOOP_OIDC_STAFF_GROUP")  # its members are staff; unset: nobody
LOOP_OIDC_TIMEOUT_SECONDS = env_float("LOOP_OIDC_TIMEOUT_SECONDS", 10.0)
LOOP_OIDC_RECHECK_MINUTES = env_int("LOOP_OIDC_RECHECK_MINUTES", 60)
# Password sign-in: all, operators (staff only: the break-glass) or off. Read as written and
# checked by identity/checks.py, so `manage.py check` names a wrong value.
LOOP_PASSWORD_LOGIN = env_str("LOOP_PASSWORD_LOGIN", "all").lower()
AUTHENTICATION_BACKENDS.insert(1, "identity.passwords.PasswordRule")  # before ModelBackend
if LOOP_OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("identity.backend.ProviderBackend")
    OIDC_RP_CLIENT_ID = LOOP_OIDC_CLIENT_ID
    OIDC_RP_CLIENT_SECRET = LOOP_OIDC_CLIENT_SECRET
    OIDC_RP_SCOPES = LOOP_OIDC_SCOPES
    OIDC_USE_NONCE = True
    OIDC_USE_PKCE = True
    OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
    OIDC_TIMEOUT = LOOP_OIDC_TIMEOUT_SECONDS
    OIDC_CREATE_USER = True  # identity.signin decides, following LOOP_SIGNUP
    OIDC_STORE_ACCESS_TOKEN = False
    OIDC_STORE_ID_TOKEN = False
    OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
    LOGIN_REDIRECT_URL_FAILURE = "login"
# <<< identity settings
# >>> assistants settings
# Whether a person may share an assistant of theirs with a group they belong to (assistants/):
# `groups` or `off` (site assistants are shared by staff either way).
LOOP_ASSISTANT_SHARING = env_choice("LOOP_ASSISTANT_SHARING", "groups", ("groups", "off"))
# <<< assistants settings
# >>> sharing settings
# A shared conversation's copy (sharing/snapshot.py), and the files it carries when ticked, are
# stored in the database: each is bounded, and a share over a bound is refused, saying which.
LOOP_SHARE_SNAPSHOT_MAX_BYTES = env_int("LOOP_SHARE_SNAPSHOT_MAX_BYTES", 5 * 1024 * 1024)
LOOP_SHARE_FILES_MAX_BYTES = env_int("LOOP_SHARE_FILES_MAX_BYTES", 20 * 1024 * 1024)
# <<< sharing settings
LOOP_USER_ACTIVE_RUNS = env_int("LOOP_USER_ACTIVE_RUNS", 2)  # queued or running, per user
LOOP_CONVERSATION_TOKENS = env_int("LOOP_CONVERSATION_TOKENS", 4000)  # earlier turns in context

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]

# A request body over this many bytes is answered 413 before it is read (loopsite/limits.py);
# Django's own bound on a form's body is the same figure.
LOOP_REQUEST_MAX_BYTES = env_int("LOOP_REQUEST_MAX_BYTES", 2 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = LOOP_REQUEST_MAX_BYTES

# Only this site's own scripts, styles and socket; loopsite/middleware.py adds the socket's
# ws:/wss: origin, and the inline styles the admin's templates carry, on the admin's pages only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

if PRODUCTION:
    SECURE_SSL_REDIRECT = True
    # Behind a proxy that terminates TLS, only the proxy knows the request came over https.
    if env_bool("LOOP_TRUST_X_FORWARDED_PROTO", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 60 * 60 * 24 * 365
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LOG_LEVEL = env_str("LOOP_LOG_LEVEL", "INFO").upper()

# Loop's own loggers (and the web server's access log) speak at LOG_LEVEL. Every other library
# speaks at WARNING: httpx, for one, logs each request to Groq at INFO, which would interleave
# with runagent's transcript. `runagent -v 2` turns them all up.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        name: {"level": LOG_LEVEL}
        for name in (
            *(
                "core",
                "agent",
                "approvals",
                "engine",
                "workspace",
                "tools",
                "sandbox",
                "memory",
                "chat",
                "accounts",
                "console",
                "mcp_servers",
                "api",
                "accounting",
                "metrics",
                "tracing",
                "notifications",
                "rights",
                "assistants",
                "identity",
                "sharing",
            ),
            *("loopsite", "django", "daphne"),
        )
    },
}
