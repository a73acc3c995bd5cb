"""The storage page: how much of the database each table takes, largest first, so an operator
sees what grows and what the retention (agent/retention.py, LOOP_KEEP_EVENTS_DAYS and
LOOP_KEEP_JOBS_DAYS) would give back. Sizes are PostgreSQL's own (pg_total_relation_size: the
table, its TOAST and its indexes); rows are the planner's estimate (pg_class.reltuples, as of the
last ANALYZE), not a count, so the page costs a catalogue read however big the tables are."""

from dataclasses import dataclass

from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.db.models import Model
from django.template.defaultfilters import filesizeformat
from django.urls import NoReverseMatch, reverse

TABLES_SQL = """
SELECT c.relname, c.reltuples::bigint, pg_total_relation_size(c.oid),
       pg_relation_size(c.oid), pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
ORDER BY pg_total_relation_size(c.oid) DESC, c.relname
"""


@dataclass(frozen=True)
class TableSize:
    table: str
    rows: int | None  # None: never analyzed, so no estimate
    total: int  # bytes: the table, its TOAST and its indexes
    data: int
    indexes: int
    model: str = ""  # the model it stores, if Django knows one
    url: str = ""  # its console list, if it has one

    @property
    def total_text(self) -> str:
        return filesizeformat(self.total)

    @property
    def data_text(self) -> str:
        return filesizeformat(self.data)

    @property
    def indexes_text(self) -> str:
        return filesizeformat(self.indexes)


def models_by_table() -> dict[str, type[Model]]:
    return {model._meta.db_table: model for model in apps.get_models(include_auto_created=True)}


def console_url(model: type[Model] | None) -> str:
    if model is None or not admin.site.is_registered(model):
        return ""
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    except NoReverseMatch:
        return ""


def table_sizes() -> list[TableSize]:
    """Every table of the database's schema, largest first."""
    known = models_by_table()
    with connection.cursor() as cursor:
        cursor.execute(TABLES_SQL)
        rows = cursor.fetchall()
    sizes = []
    for table, estimate, total, data, indexes in rows:
        model = known.get(table)
        sizes.append(
            TableSize(
                table=table,
                rows=estimate if estimate >= 0 else None,
                total=total,
                data=data,
                indexes=indexes,
                model=f"{model._meta.app_label}.{model.__name__}" if model else "",
                url=console_url(model),
            )
        )
    return sizes


def database_size() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        size: int = cursor.fetchone()[0]
        return size
