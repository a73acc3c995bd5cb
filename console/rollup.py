"""The usage page's rollup: what each user's runs of each day did, summed once and kept, so that
a year of usage reads a few hundred thousand small rows at most instead of every run, failed
tool call and breaker trip of the year (console/selectors.py, UsagePages).

Kept by its readers, not by the runs: each read of the page first brings the rollup up to date
in the current time zone (`refresh`), with no hook in the engine and no cost on a run's writes.
A (day, user) group is summed again from the runs when any of its runs

- is live (queued or running: its figures still change),
- was made (`created_at`) since the last refresh, less `MARGIN` for clocks and commits, or
- ended (`finished_at`) since then,

and a day the rollup has never summed is summed whole. A run's figures, tool calls and breaker
trips change only while it is live, and a run that is continued is live again, so these catch
every change the engine makes. Each day also keeps its groups' sums, all users together, so a
year's per-day figures are a few hundred rows. Deleting runs is the one change these do not
see: the console's own delete forgets those days (`forget_days`: summed again at the next
read); a deleted user's groups go with them (a foreign key, on_delete CASCADE), and a trigger
forgets their days likewise; a run deleted by other means (a shell) leaves its day's figures
until `rebuild()`.

Days are the site's days as TruncDate computes them in the current time zone; the rollup is
kept per time zone (`zone`), so a site that changes TIME_ZONE sums its days again, once.

The tables are agent/usage.py's, made by migration agent.0013_usage_rollup, which fills them for
TIME_ZONE.
"""

from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import TruncDate
from django.db.models.sql import Query
from django.utils import timezone

from agent.models import LIVE, AgentRun
from core.results import ToolStatus

GROUPS = "agent_usage_rollup"  # (zone, day, user_id) → the figures of that user's runs that day
# (zone, day) → the day's groups summed (`users`: how many), for every day summed, even empty
DAYS = "agent_usage_rollup_day"
MARKS = "agent_usage_rollup_mark"  # zone → when its rollup was last brought up to date
LIVE_STATUSES = LIVE
# A tool call that ran and did not work. A skipped call never ran: the run stopped first.
# An interrupted call's worker stopped under it: as far as anyone knows, it did not work.
FAILED_TOOL_STATUSES = (
    ToolStatus.ERROR,
    ToolStatus.TIMEOUT,
    ToolStatus.DENIED,
    ToolStatus.INTERRUPTED,
)
# How far before the last refresh a run's end is looked at again: a run's `finished_at` is the
# worker's clock when it wrote the end, which may be behind the database's and commit later.
MARGIN = timedelta(seconds=60)
# Runs that ended since a refresh this recent are found through the index on the ends of runs
# whose log is kept (agent_run_unpruned_end_idx); the retention prunes only runs that ended at
# least a day ago, so none of them is pruned yet. After a longer pause, every run is looked at.
RECENT = timedelta(hours=1)
FIGURES: tuple[str, ...] = ("runs", "succeeded", "halted", "failed", "cancelled", "tool_calls")
FIGURES += ("tool_failures", "breaker_trips", "prompt_tokens", "completion_tokens")
# What each figure of a group sums over the group's runs `r`, each with its failed calls and
# breaker trips counted.
SUMS = {
    "runs": "count(*)",
    "succeeded": "count(*) FILTER (WHERE r.status = 'succeeded')",
    "halted": "count(*) FILTER (WHERE r.status = 'halted')",
    "failed": "count(*) FILTER (WHERE r.status = 'failed')",
    "cancelled": "count(*) FILTER (WHERE r.status = 'cancelled')",
    "tool_calls": "coalesce(sum(r.tool_calls), 0)",
    "tool_failures": "coalesce(sum(r.failures), 0)",
    "breaker_trips": "coalesce(sum(r.trips), 0)",
    "prompt_tokens": "coalesce(sum(r.prompt_tokens), 0)",
    "completion_tokens": "coalesce(sum(r.completion_tokens), 0)",
}


def zone() -> str:
    """The name the rollup's rows of the current time zone are kept under."""
    return str(timezone.get_current_timezone_name())


def day_of_run() -> tuple[str, list[Any]]:
    """The SQL of a run's day (of `agent_agentrun`.`created_at`), as TruncDate computes it in
    the current time zone: the page's days are exactly those of the code that read the runs."""
    query = Query(AgentRun)
    compiler = query.get_compiler(connection=connection)
    sql, params = TruncDate("created_at").resolve_expression(query).as_sql(compiler, connection)
    return sql, list(params)


def sum_groups(runs_sql: str, runs_params: Sequence[Any], few: bool) -> tuple[str, list[Any]]:
    """The statement that sums, per day and user, the runs `runs_sql` selects (their id, user_id,
    status, tool_calls, tokens and day, from `agent_agentrun`), with their failed tool calls and
    breaker trips, into the rollup: every group they touch is replaced whole, so `runs_sql` must
    select all the runs of each group it touches. The calls and trips of `few` runs are counted
    by an index lookup a run (the planner cannot size the runs, and a join it sized wrong took
    seconds); of whole days, in one pass over those of the runs."""
    columns = ", ".join(FIGURES)
    sums = ", ".join(SUMS[name] for name in FIGURES)
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in FIGURES)
    if few:
        counted = """
          SELECT runs.*,
            (SELECT count(*) FROM tools_toolexecution e
             WHERE e.run_id = runs.id AND e.status = ANY(%s)) AS failures,
            (SELECT count(*) FROM agent_breakertrip b WHERE b.run_id = runs.id) AS trips
          FROM runs
        """
    else:
        counted = """
          SELECT runs.*, f.n AS failures, t.n AS trips FROM runs
          LEFT JOIN (
            SELECT run_id, count(*) AS n FROM tools_toolexecution
            WHERE status = ANY(%s) AND run_id IN (SELECT id FROM runs) GROUP BY run_id
          ) f ON f.run_id = runs.id
          LEFT JOIN (
            SELECT run_id, count(*) AS n FROM agent_breakertrip
            WHERE run_id IN (SELECT id FROM runs) GROUP BY run_id
          ) t ON t.run_id = runs.id
        """
    sql = f"""
        WITH runs AS MATERIALIZED ({runs_sql})
        INSERT INTO {GROUPS} (zone, day, user_id, {columns})
        SELECT %s, r.day, r.user_id, {sums}
        FROM ({counted}) r
        GROUP BY r.day, r.user_id
        ON CONFLICT (zone, day, user_id) DO UPDATE SET {updates}
        RETURNING day
    """  # noqa: S608  (names are constants, values parameters)
    return sql, [*runs_params, zone(), list(map(str, FAILED_TOOL_STATUSES))]


RUN_COLUMNS = "r.id, r.user_id, r.status, r.tool_calls, r.prompt_tokens, r.completion_tokens"


def sum_days(days: Sequence[date], cursor: Any) -> None:
    """Sum these days whole, from their runs: every group of theirs replaced, none left over."""
    if not days:
        return
    day, day_params = day_of_run()
    day_r = day.replace('"agent_agentrun".', "r.")
    # A day of any time zone lies within the UTC days around it: the index on created_at finds
    # the runs, the day's own SQL keeps those of the day.
    runs_sql = f"""
        SELECT {RUN_COLUMNS}, {day_r} AS day FROM agent_agentrun r
        WHERE r.created_at >= %s::date - 1 AND r.created_at < %s::date + 2
          AND {day_r} = ANY(%s::date[])
    """  # noqa: S608
    params = [*day_params, min(days), max(days), *day_params, list(days)]
    cursor.execute(
        f"DELETE FROM {GROUPS} WHERE zone = %s AND day = ANY(%s::date[])",  # noqa: S608
        [zone(), list(days)],
    )
    cursor.execute(*sum_groups(runs_sql, params, few=False))
    sum_users(days, cursor)


def sum_users(days: Iterable[date], cursor: Any) -> None:
    """Sum the groups of these days into the days' own rows (all users together), which also
    marks them summed: the page's per-day figures over a year are then a few hundred rows."""
    columns = ", ".join(FIGURES)
    sums = ", ".join(f"coalesce(sum(g.{name}), 0)" for name in FIGURES)
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in ("users", *FIGURES))
    cursor.execute(
        f"""
        INSERT INTO {DAYS} (zone, day, users, {columns})
        SELECT %s, w.day, count(g.user_id), {sums}
        FROM unnest(%s::date[]) AS w(day)
        LEFT JOIN {GROUPS} g ON g.zone = %s AND g.day = w.day
        GROUP BY w.day
        ON CONFLICT (zone, day) DO UPDATE SET {updates}
        """,  # noqa: S608
        [zone(), sorted(set(days)), zone()],
    )


def sum_changed_groups(since: datetime, now: datetime, cursor: Any) -> None:
    """Sum again the groups of the days already summed that have a live run, or a run made or
    ended since `since`."""
    day, day_params = day_of_run()
    day_r = day.replace('"agent_agentrun".', "r.")
    day_c = day.replace('"agent_agentrun".', "c.")
    kept_logs = "AND c.log_pruned_at IS NULL" if now - since < RECENT else ""
    changed = f"""
        SELECT DISTINCT {day_c} AS day, c.user_id FROM agent_agentrun c
        WHERE c.status = ANY(%s) OR c.created_at >= %s OR (c.finished_at >= %s {kept_logs})
    """  # noqa: S608
    runs_sql = f"""
        SELECT {RUN_COLUMNS}, g.day FROM ({changed}) g
        JOIN {DAYS} d ON d.zone = %s AND d.day = g.day
        JOIN agent_agentrun r ON r.user_id = g.user_id
          AND r.created_at >= g.day - 1 AND r.created_at < g.day + 2 AND {day_r} = g.day
    """  # noqa: S608
    after = since - MARGIN
    params = [*day_params, list(map(str, LIVE_STATUSES)), after, after, zone(), *day_params]
    cursor.execute(*sum_groups(runs_sql, params, few=True))
    sum_users([row[0] for row in cursor.fetchall()], cursor)


def refresh(since: date, until: date) -> None:
    """Bring the rollup of the current time zone up to date for the days from `since` to
    `until`: days never summed are summed whole, and the groups that changed since the last
    refresh (on any day) again. One refresh at a time per time zone; they queue."""
    wanted = [since + timedelta(days=n) for n in range((until - since).days + 1)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"loop usage {zone()}"])
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
        cursor.execute(f"SELECT refreshed_at FROM {MARKS} WHERE zone = %s", [zone()])  # noqa: S608
        mark = cursor.fetchone()
        if mark is not None:
            sum_changed_groups(mark[0], now, cursor)
        cursor.execute(
            f"SELECT day FROM {DAYS} WHERE zone = %s AND day BETWEEN %s AND %s",  # noqa: S608
            [zone(), since, until],
        )
        summed = {row[0] for row in cursor.fetchall()}
        sum_days([day for day in wanted if day not in summed], cursor)
        cursor.execute(
            f"INSERT INTO {MARKS} (zone, refreshed_at) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (zone) DO UPDATE SET refreshed_at = EXCLUDED.refreshed_at",
            [zone(), now],
        )


def rebuild() -> None:
    """Forget the rollup of the current time zone and sum every day from the first run's to
    today's again (after runs were deleted outside the console, or to sum a site's old runs ahead
    of the page's first read)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DAYS} WHERE zone = %s", [zone()])  # noqa: S608
        cursor.execute(f"DELETE FROM {GROUPS} WHERE zone = %s", [zone()])  # noqa: S608
        cursor.execute(f"DELETE FROM {MARKS} WHERE zone = %s", [zone()])  # noqa: S608
        # Raw SQL, as the migration that calls this reads the runs table of its time.
        cursor.execute("SELECT min(created_at) FROM agent_agentrun")
        first = cursor.fetchone()[0]
        today = timezone.localdate()
        refresh(timezone.localdate(first) if first else today, today)


def forget_days(moments: Iterable[datetime]) -> None:
    """Have the days around these moments (runs' creation times) summed again at the next read,
    in every time zone: their runs were deleted."""
    days = sorted({moment.date() + timedelta(days=n) for moment in moments for n in (-1, 0, 1)})
    if not days:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DAYS} WHERE day = ANY(%s::date[])", [days])  # noqa: S608


def per_day(since: date, until: date, user_id: int | None = None) -> list[tuple[Any, ...]]:
    """Per day, newest first: the day, how many users ran something, then the FIGURES summed."""
    columns = ", ".join(FIGURES)
    if user_id is None:  # the days' own sums
        sql = f"""
            SELECT day, users, {columns} FROM {DAYS}
            WHERE zone = %s AND day BETWEEN %s AND %s AND users > 0 ORDER BY day DESC
        """  # noqa: S608
        params: list[Any] = [zone(), since, until]
    else:  # that user's groups, one a day
        sql = f"""
            SELECT day, 1, {columns} FROM {GROUPS}
            WHERE zone = %s AND user_id = %s AND day BETWEEN %s AND %s ORDER BY day DESC
        """  # noqa: S608
        params = [zone(), user_id, since, until]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def per_user(since: date, until: date, user_id: int | None = None) -> list[tuple[Any, ...]]:
    """Per day and user: the day, the user's id and name, then the FIGURES."""
    mine = "AND g.user_id = %s" if user_id is not None else ""
    columns = ", ".join(f"g.{name}" for name in FIGURES)
    sql = f"""
        SELECT g.day, g.user_id, u.username, {columns}
        FROM {GROUPS} g JOIN auth_user u ON u.id = g.user_id
        WHERE g.zone = %s AND g.day BETWEEN %s AND %s {mine}
    """  # noqa: S608
    params: list[str | date | int] = [zone(), since, until]
    params += [user_id] if user_id is not None else []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
