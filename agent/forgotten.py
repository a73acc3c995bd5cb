"""A person takes memories back: each is forgotten (memory.forgetting), and its text is taken out
of every run of theirs, so what they took back is kept verbatim nowhere they cannot see (the
runs of a conversation they deleted stay for the operators' audit).

Every quote of the text becomes FORGOTTEN: the `remember` call that stored it and its result,
the recall cards that showed it, the messages the model was sent, the run's task and answer, the
messages a program gave before its task (its prelude), the audit's tool executions and the
conversation's title. What the person or the model said in
other words stays: that is not the memory's text.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from agent.models import AgentRun, Conversation, RunEvent, ToolExecution
from memory.forgetting import forget
from memory.models import ForgottenMemory, Memory

FORGOTTEN = "[forgotten]"


def take_back(owner: User, memories: QuerySet[Memory]) -> list[ForgottenMemory]:
    """Forget `memories` (the owner's own: the caller chose them) as their owner, and take
    their texts out of the owner's runs, in one transaction."""
    with transaction.atomic():
        texts = list(memories.select_for_update().values_list("text", flat=True))
        records = forget(memories, by=owner)
        unquote(owner, texts)
    return records


def unquote(owner: User, texts: Iterable[str]) -> int:
    """Replace each quote of `texts` in the owner's runs with FORGOTTEN; how many rows changed."""
    forms = {form for text in texts if text.strip() for form in quoted_forms(text)}
    if not forms:
        return 0
    pattern = re.compile("|".join(bounded(form) for form in sorted(forms, key=len, reverse=True)))
    runs = AgentRun.objects.filter(user=owner)
    changed = unquote_events(RunEvent.objects.filter(run__in=runs), forms, pattern)
    changed += unquote_json(runs, "prelude", forms, pattern)
    for rows, fields in (
        (runs, ("task", "answer", "error")),
        (ToolExecution.objects.filter(run__in=runs), ("arguments", "result", "error")),
        (Conversation.objects.filter(owner=owner), ("title",)),
    ):
        changed += unquote_fields(rows, fields, forms, pattern)
    return changed


def quoted_forms(text: str) -> set[str]:
    """The text as a log can quote it: as it is, and inside a JSON string (a tool call's
    arguments are JSON), with and without its non-ASCII letters escaped."""
    return {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}


def bounded(form: str) -> str:
    """`form` as a pattern that matches only whole words at its ends: a memory "teal" does not
    take the letters out of "steal"."""
    before = r"(?<!\w)" if re.match(r"\w", form[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", form[-1]) else ""
    return before + re.escape(form) + after


def unquote_events(events: QuerySet[RunEvent], forms: set[str], pattern: re.Pattern[str]) -> int:
    return unquote_json(events, "data", forms, pattern)


def unquote_json(rows: QuerySet[Any], field: str, forms: set[str], pattern: re.Pattern[str]) -> int:
    """The stored JSON is searched as PostgreSQL writes it out, each form escaped once more."""
    as_json = {json.dumps(form, ensure_ascii=False)[1:-1] for form in forms}
    found = rows.annotate(stored=Cast(field, TextField())).filter(any_of(["stored"], as_json))
    changed = 0
    for row in found.only("pk", field).iterator():
        data = unquoted(getattr(row, field), pattern)
        if data != getattr(row, field):
            type(row).objects.filter(pk=row.pk).update(**{field: data})
            changed += 1
    return changed


def unquote_fields(
    rows: QuerySet[Any], fields: tuple[str, ...], forms: set[str], pattern: re.Pattern[str]
) -> int:
    found = rows.filter(any_of(fields, forms))
    changed = 0
    for row in found.only("pk", *fields).iterator():
        values = {field: pattern.sub(FORGOTTEN, getattr(row, field)) for field in fields}
        if any(values[field] != getattr(row, field) for field in fields):
            type(row).objects.filter(pk=row.pk).update(**values)
            changed += 1
    return changed


def any_of(fields: Iterable[str], forms: set[str]) -> Q:
    """Rows where any of `fields` holds any of `forms`."""
    return Q.create(
        [(f"{field}__contains", form) for field in fields for form in forms], connector=Q.OR
    )


def unquoted(value: Any, pattern: re.Pattern[str]) -> Any:
    """`value` (stored JSON) with every string's quotes replaced; keys and numbers stay."""
    if isinstance(value, str):
        return pattern.sub(FORGOTTEN, value)
    if isinstance(value, list):
        return [unquoted(item, pattern) for item in value]
    if isinstance(value, dict):
        return {key: unquoted(item, pattern) for key, item in value.items()}
    return value
