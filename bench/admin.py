"""The operators' console at scale: every list page, timed with 100,000 runs and 1,000,000 events.

    .venv/bin/python bench/admin.py [--runs 100000] [--repeats 7] [--keep] [--only growth]
        [--project OLD]

Runs in its own database (`loop_bench_admin` on the same server), filled in SQL with synthetic
records shaped like real ones: 1,000 users, `--runs` runs over the last year (ten events and two
tool executions each, one in twenty halted by the breaker), 20,000 memories and 1,000
forgettings. Each page is requested through Django's test client as a superuser, as a browser
would (sessions, middleware, templates and all); the figure is the median of `--repeats`
requests after one to warm up, with the number of queries the page made.
Floor: every list page under 200 ms (median). Detail pages are shown for comparison.
`--keep` keeps the database for the next run, which then skips the fill. `--only growth` times
only the pages issue 27 set a floor for: the run search (under 200 ms at 100,000 runs) and the
usage page over a year (under 500 ms: first as it is, then with 360 runs ended before each
request, the refresh a page read once a minute at full load makes), and the storage page. The
usage page's rollup is summed from every run at the start (timed), as migration agent.0013 does
for a site's runs: the fill writes runs in SQL, past the page. `--project OLD` runs the same bench
on another checkout's code and its own database (say the code before, /work/wt-base), for the
figures side by side.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path


def project_root() -> Path:
    """This checkout, or the one `--project` names: read before Django starts, since the code
    (and the database its settings name) must be that project's."""
    if "--project" in sys.argv:
        return Path(sys.argv[sys.argv.index("--project") + 1]).resolve()
    return Path(__file__).resolve().parent.parent


sys.path.insert(0, str(project_root()))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib import admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.hashers import make_password  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.urls import NoReverseMatch, reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from agent.models import AgentRun, RunEvent  # noqa: E402
from memory.embedders import HashedNgramEmbedder  # noqa: E402
from memory.models import EmbeddingSpace, Memory  # noqa: E402

USERS = 1000
EVENTS_PER_RUN = 10
MEMORIES = 20_000
FORGOTTEN = 1000
FLOOR_MS = 200.0
# Issue 27's floors: the run search at 100,000 runs, the usage page over a year.
SEARCH_FLOOR_MS = 200.0
USAGE_YEAR_FLOOR_MS = 500.0
# Runs that end in a minute at the site's capacity on 2 cores (issue 27: about 360).
RUNS_A_MINUTE = 360

# One run: started, memories recalled, two steps of a model turn and a tool call, the answer.
# Each event's data has the fields of its kind (core/events.py), so the pages read it as real.
EVENTS_SQL = """
INSERT INTO agent_runevent (run_id, seq, kind, step, data, created_at)
SELECT r.id, s.seq, s.kind, s.step,
  CASE s.kind
    WHEN 'run_started' THEN jsonb_build_object('task', r.task, 'provider', 'mock',
      'model', r.model, 'limits', r.limits, 'messages', jsonb_build_array(
        jsonb_build_object('role', 'system', 'content', 'You are Loop.'),
        jsonb_build_object('role', 'user', 'content', r.task)))
    WHEN 'memories_recalled' THEN jsonb_build_object('memories', jsonb_build_array(
      jsonb_build_object('id', r.id %% %(memories)s + 1, 'text', 'Task: an earlier task',
        'score', 0.61, 'parts', jsonb_build_object('similarity', 0.55, 'recency', 0.9,
        'importance', 0.5))))
    WHEN 'model_replied' THEN jsonb_build_object('step', s.step, 'text',
      CASE WHEN s.step = 3 THEN r.answer ELSE '' END,
      'tool_calls', CASE WHEN s.step = 3 THEN '[]'::jsonb ELSE jsonb_build_array(
        jsonb_build_object('id', 'call_' || s.step, 'name', 'read_file',
          'arguments', '{"path": "notes.txt"}')) END,
      'prompt_tokens', 400 * s.step, 'completion_tokens', 40, 'recovered_error', '',
      'reasoning', '')
    WHEN 'tool_call_started' THEN jsonb_build_object('step', s.step, 'call_id',
      'call_' || s.step, 'tool', 'read_file', 'arguments', '{"path": "notes.txt"}')
    WHEN 'tool_call_finished' THEN jsonb_build_object('step', s.step, 'call_id',
      'call_' || s.step, 'tool', 'read_file', 'arguments', '{"path": "notes.txt"}',
      'status', 'ok', 'text', 'buy milk', 'duration', 0.002, 'policy', '',
      'truncated', false)
    ELSE jsonb_build_object('status', r.status, 'answer', r.answer, 'halt_reason',
      r.halt_reason, 'error', r.error, 'iterations', r.iterations, 'tool_calls', r.tool_calls,
      'prompt_tokens', r.prompt_tokens, 'completion_tokens', r.completion_tokens,
      'duration', 1.5)
  END,
  r.created_at + s.seq * interval '100 milliseconds'
FROM agent_agentrun r CROSS JOIN (VALUES
  (1, 'run_started', 0), (2, 'memories_recalled', 0), (3, 'model_replied', 1),
  (4, 'tool_call_started', 1), (5, 'tool_call_finished', 1), (6, 'model_replied', 2),
  (7, 'tool_call_started', 2), (8, 'tool_call_finished', 2), (9, 'model_replied', 3),
  (10, 'run_finished', 0)) AS s(seq, kind, step)
"""

RUNS_SQL = """
INSERT INTO agent_agentrun (user_id, task, status, halt_reason, answer, error, cause, provider,
  model, limits, iterations, tool_calls, prompt_tokens, completion_tokens, created_at, started_at,
  finished_at, cancel_requested_at, attempt, worker, resumes)
SELECT u.ids[1 + g %% %(users)s],
  'Task ' || g || ': read notes.txt and tell me what to buy',
  CASE WHEN g %% 20 = 0 THEN 'halted' WHEN g %% 50 = 1 THEN 'failed'
       WHEN g %% 50 = 2 THEN 'cancelled' ELSE 'succeeded' END,
  CASE WHEN g %% 20 = 0 THEN 'tool_failures' ELSE '' END,
  'Buy milk (' || g || ').',
  CASE WHEN g %% 50 = 1 THEN 'Model failed: Groq answered 503' ELSE '' END,
  CASE WHEN g %% 50 = 1 THEN 'model_down' ELSE '' END, 'mock',
  CASE WHEN g %% 3 = 0 THEN 'openai/gpt-oss-120b' ELSE 'mock' END,
  '{"max_iterations": 10}'::jsonb, 3, 2, 1200, 120,
  start + g * interval '1 second' * %(spacing)s,
  start + g * interval '1 second' * %(spacing)s,
  start + g * interval '1 second' * %(spacing)s + interval '1.5 seconds',
  NULL, 1, '', 0
FROM generate_series(1, %(runs)s) AS g,
  (SELECT array_agg(id ORDER BY id) AS ids FROM auth_user WHERE username LIKE 'bench%%') AS u,
  (SELECT now() - interval '365 days' AS start) AS t
"""

EXECUTIONS_SQL = """
INSERT INTO tools_toolexecution (run_id, step, call_id, tool, arguments, status, result, error,
  truncated, duration, policy, created_at)
SELECT r.id, s.step, 'call_' || s.step, t.tool, '{"path": "notes.txt"}',
  CASE WHEN r.halt_reason <> '' OR (r.id + s.step) %% 7 = 0 THEN 'error' ELSE 'ok' END,
  'buy milk', CASE WHEN r.halt_reason <> '' THEN 'notes.txt does not exist' ELSE '' END,
  false, 0.002, CASE WHEN t.tool = 'run_code' THEN 'bubblewrap' ELSE '' END,
  r.created_at + s.step * interval '1 second'
FROM agent_agentrun r CROSS JOIN (VALUES (1), (2)) AS s(step),
  LATERAL (SELECT (ARRAY['run_code', 'read_file', 'write_file', 'list_files',
    'web_search'])[1 + (r.id + s.step) %% 5] AS tool) AS t
"""

TRIPS_SQL = """
INSERT INTO agent_breakertrip (run_id, step, tool, reason, failures, created_at)
SELECT r.id, 2, 'read_file', 'tool_failures',
  '[{"arguments": "{}", "error": "notes.txt does not exist"}]'::jsonb,
  r.created_at + interval '1 second'
FROM agent_agentrun r WHERE r.halt_reason = 'tool_failures'
"""

MEMORIES_SQL = """
INSERT INTO memory_memory (owner_id, text, embedding, content_hash, origin, source_run_id,
  importance, created_at, updated_at, last_recalled_at, recall_count)
SELECT r.user_id, 'Task: ' || r.task || E'\nOutcome: succeeded\nAnswer: ' || r.answer,
  (SELECT array_agg(random() + (d.i + r.id) * 0)::real[]
    FROM generate_series(1, %(dimensions)s) AS d(i))::halfvec,
  md5(r.id::text), CASE WHEN r.id %% 10 = 0 THEN 'told' ELSE 'run' END, r.id, 0.5,
  r.created_at, r.created_at, NULL, 0
FROM agent_agentrun r WHERE r.id %% (%(runs)s / %(memories)s) = 0 LIMIT %(memories)s
"""

FORGOTTEN_SQL = """
INSERT INTO memory_forgottenmemory (memory_id, owner_id, owner_name, text, origin, source_run_id,
  forgotten_by_id, forgotten_by_name, forgotten_at)
SELECT 10000000 + g, u.id, u.username, 'Task: something forgotten ' || g, 'run', NULL, u.id,
  u.username, now() - g * interval '1 hour'
FROM generate_series(1, %(forgotten)s) AS g JOIN auth_user u ON u.username = 'bench' || (g %% 10)
"""


def fill(runs: int) -> None:
    """Synthetic records, made in SQL: a minute or two for a million events."""
    password = make_password(None)
    get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench{n}", password=password) for n in range(USERS)
    )
    EmbeddingSpace.objects.update_or_create(pk=1, defaults={"embedder": HashedNgramEmbedder.name})
    index = next(i for i in Memory._meta.indexes if i.name == "memory_embedding_hnsw")
    with connection.schema_editor() as editor:
        editor.remove_index(Memory, index)
    parameters = {
        "users": USERS,
        "runs": runs,
        "spacing": 365 * 86400 // runs,
        "memories": min(MEMORIES, runs),
        "dimensions": HashedNgramEmbedder().dimensions,
        "forgotten": FORGOTTEN,
    }
    with connection.cursor() as cursor:
        for name, sql in (
            ("runs", RUNS_SQL),
            ("events", EVENTS_SQL),
            ("tool executions", EXECUTIONS_SQL),
            ("breaker trips", TRIPS_SQL),
            ("memories", MEMORIES_SQL),
            ("forgotten memories", FORGOTTEN_SQL),
        ):
            started = time.perf_counter()
            cursor.execute(sql, parameters)
            took = time.perf_counter() - started
            print(f"filled {name:<19} {cursor.rowcount:>9,} rows in {took:5.1f} s")
        cursor.execute("SET maintenance_work_mem = '512MB'")
    with connection.schema_editor() as editor:
        editor.add_index(Memory, index)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def timed(
    client: Client, url: str, repeats: int, before: Callable[[], None] | None = None
) -> tuple[float, int]:
    """The median time of `repeats` requests after a warm-up, in ms, and the queries of one;
    `before` runs ahead of each request, untimed."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        reset_queries()
        started = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), len(connection.queries)


def sum_usage_again() -> None:
    """The usage rollup summed from every run, as migration agent.0013 does on a site's runs:
    the fill writes runs in SQL, past the page that keeps the rollup. Timed, as a deploy's
    one-time cost. The code before has no rollup."""
    try:
        from console import rollup
    except ImportError:
        return
    started = time.perf_counter()
    rollup.rebuild()
    print(f"usage rollup summed from every run in {time.perf_counter() - started:.1f} s")


def a_minute_of_runs_end() -> None:
    """The newest RUNS_A_MINUTE runs end now, as if the site worked at its capacity and the
    usage page were read once a minute: the page sums their days and users again (the runs
    that end now were made lately: here, over the last day or two)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_agentrun SET finished_at = now() WHERE id IN ("
            "SELECT id FROM agent_agentrun ORDER BY id DESC LIMIT %s)",
            [RUNS_A_MINUTE],
        )


def pages() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(name, url) of the list pages, which have the floor, and of some detail pages."""
    runs = reverse("admin:agent_agentrun_changelist")
    events = reverse("admin:agent_runevent_changelist")
    executions = reverse("admin:agent_toolexecution_changelist")
    memories = reverse("admin:memory_memory_changelist")
    usage = reverse("admin:agent_agentrun_usage")
    month_ago = timezone.localdate() - timedelta(days=29)
    year_ago = timezone.localdate() - timedelta(days=365)
    last = AgentRun.objects.order_by("-pk").values_list("pk", "user_id", "created_at").first()
    run_id, user_id, created = last
    memory = Memory.objects.order_by("-pk").values_list("pk", flat=True).first()
    # A deep page that exists: the admin redirects a page past the last (fewer --runs).
    deep = min(
        100, -(-AgentRun.objects.count() // admin.site.get_model_admin(AgentRun).list_per_page)
    )
    day = f"created_at__year={created.year}&created_at__month={created.month}"
    lists = [
        ("index", reverse("admin:index")),
        ("runs", runs),
        ("runs: status halted", f"{runs}?status__exact=halted"),
        ("runs: halt reason", f"{runs}?halt_reason__exact=tool_failures"),
        ("runs: model", f"{runs}?model=mock"),
        ("runs: one user", f"{runs}?user={user_id}"),
        ("runs: one month", f"{runs}?{day}"),
        ("runs: one day", f"{runs}?{day}&created_at__day={created.day}"),
        (f"runs: page {deep}", f"{runs}?p={deep}"),
        ("events", events),
        ("events: one run", f"{events}?run__id__exact={run_id}"),
        ("tool executions", executions),
        ("tool executions: tool+status", f"{executions}?tool=read_file&status__exact=error"),
        ("tool executions: policy", f"{executions}?policy=bubblewrap"),
        ("tool executions: one user", f"{executions}?user={user_id}"),
        ("breaker trips + summary", reverse("admin:agent_breakertrip_changelist")),
        ("memories", memories),
        ("memories: one owner", f"{memories}?user={user_id}"),
        ("forgotten memories", reverse("admin:memory_forgottenmemory_changelist")),
        ("users", reverse("admin:auth_user_changelist")),
        ("sign-ups waiting", reverse("admin:auth_user_changelist") + "?approval=waiting"),
        ("usage, last 7 days", reverse("admin:agent_agentrun_usage")),
    ]
    details = [
        ("run page with timeline", reverse("admin:agent_agentrun_change", args=[run_id])),
        ("run transcript JSON", reverse("admin:agent_agentrun_transcript", args=[run_id])),
        ("memory page + neighbours", reverse("admin:memory_memory_change", args=[memory])),
        ("runs: search task", f"{runs}?q=Task+99999"),
        ("tool executions: search", f"{executions}?q=does+not+exist"),
        ("usage, last 30 days", f"{usage}?since={month_ago}"),
        ("usage, last year", f"{usage}?since={year_ago}"),
    ]
    return lists, details


def growth_pages(changed: bool = False) -> list[tuple[str, str, float | None]]:
    """(name, url, floor) of the pages issue 27 measures: searches that find one run, every run
    and none, the usage page over a year, and the storage page where the code has one;
    `changed`: the usage page over a year again, with runs ending before each request."""
    runs = reverse("admin:agent_agentrun_changelist")
    usage = reverse("admin:agent_agentrun_usage")
    year_ago = timezone.localdate() - timedelta(days=365)
    last = AgentRun.objects.order_by("-pk").values_list("pk", flat=True).first()
    found: list[tuple[str, str, float | None]] = [
        ("runs: search, one run", f"{runs}?q=Task+{last}%3A", SEARCH_FLOOR_MS),
        ("runs: search, an error", f"{runs}?q=answered+503", SEARCH_FLOOR_MS),
        ("runs: search, a word start", f"{runs}?q=answ", SEARCH_FLOOR_MS),
        ("runs: search, no run", f"{runs}?q=zebra", SEARCH_FLOOR_MS),
        ("runs: search, every run", f"{runs}?q=milk", SEARCH_FLOOR_MS),
        ("usage, last year", f"{usage}?since={year_ago}", USAGE_YEAR_FLOOR_MS),
        ("usage, last year, page 10", f"{usage}?since={year_ago}&p=10", USAGE_YEAR_FLOOR_MS),
    ]
    if changed:
        found.append(
            (
                f"usage, year, {RUNS_A_MINUTE} ended",
                f"{usage}?since={year_ago}",
                USAGE_YEAR_FLOOR_MS,
            )
        )
    with contextlib.suppress(NoReverseMatch):  # the code before had no storage page
        found.append(("storage", reverse("admin:agent_agentrun_storage"), None))
    return found


def time_growth(client: Client, repeats: int) -> None:
    print(f"\n{'page':<32}{'median':>10}{'queries':>9}  floor")
    usual = growth_pages()
    for name, url, floor in growth_pages(changed=True):
        before = None if (name, url, floor) in usual else a_minute_of_runs_end
        ms, queries = timed(client, url, repeats, before)
        verdict = "" if floor is None else f"< {floor:.0f} ms: {'met' if ms < floor else 'MISSED'}"
        print(f"{name:<32}{ms:>7.1f} ms{queries:>9}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database for the next run")
    parser.add_argument("--only", choices=("growth",), help="time only issue 27's pages")
    parser.add_argument("--project", help="run on this checkout's code and database instead")
    options = parser.parse_args()
    setup_test_environment()  # lets the test client in (ALLOWED_HOSTS) and records queries
    connection.settings_dict["TEST"]["NAME"] = "loop_bench_admin"
    original = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=True)
    try:
        if AgentRun.objects.count() != options.runs:  # kept from a run of another size, or new
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE auth_user CASCADE")
            fill(options.runs)
        sum_usage_again()
        print(
            f"{AgentRun.objects.count():,} runs, {RunEvent.objects.count():,} events, "
            f"{Memory.objects.count():,} memories, {get_user_model().objects.count():,} users"
        )
        root, _ = get_user_model().objects.get_or_create(
            username="bench-root", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client()
        client.force_login(root)
        settings.DEBUG = True  # connection.queries is only kept when DEBUG is on
        print(f"code: {project_root()}")
        if options.only == "growth":
            time_growth(client, options.repeats)
            return
        lists, details = pages()
        print(f"\n{'page':<32}{'median':>10}{'queries':>9}")
        slowest = 0.0
        for name, url in lists:
            ms, queries = timed(client, url, options.repeats)
            slowest = max(slowest, ms)
            print(f"{name:<32}{ms:>7.1f} ms{queries:>9}")
        verdict = "met" if slowest < FLOOR_MS else "MISSED"
        print(f"slowest list page {slowest:.1f} ms; floor < {FLOOR_MS:.0f} ms: {verdict}")
        print("\nfor comparison (no floor)")
        for name, url in details:
            ms, queries = timed(client, url, options.repeats)
            print(f"{name:<32}{ms:>7.1f} ms{queries:>9}")
    finally:
        connection.creation.destroy_test_db(original, verbosity=0, keepdb=options.keep)


if __name__ == "__main__":
    main()
