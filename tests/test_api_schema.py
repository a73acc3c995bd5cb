"""The published OpenAPI document (/api/v1/openapi.json) is what the API does: schemathesis
generates requests for every operation from the document alone, sends them with a working key of
alice's (through Django's WSGI application, in the test's database transaction), and each answer
must be no server error, of a status the operation documents, of a documented content type, and
of the documented schema. A bounded, seeded number of examples per operation keeps it a normal
test of the suite (deterministic: the same requests every run)."""

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tools.context import context_for

pytestmark = pytest.mark.django_db

EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def in_the_tests_transaction() -> Iterator[None]:
    """Requests through the WSGI application keep the test's connection (and its transaction)
    open, as Django's test client does: the end of a request closes no connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def schema(
    settings, alice, workspaces, in_the_tests_transaction, async_views_keep_the_tests_connection
) -> Any:
    """The document as published, read through the site itself, with rates high enough for the
    generated requests (the rates have tests of their own)."""
    settings.LOOP_API_KEY_REQUESTS_PER_MINUTE = 100_000
    settings.LOOP_API_PERSON_REQUESTS_PER_MINUTE = 100_000
    settings.LOOP_MEMORY_CHANGES_PER_MINUTE = 100_000
    settings.LOOP_MEMORY_SEARCHES_PER_MINUTE = 100_000
    # A run's stream (no worker here works it) ends soon, as after its life's bound.
    settings.LOOP_API_STREAM_SECONDS = 1
    settings.LOOP_API_POLL_SECONDS = 0.2
    settings.LOOP_MODEL = "mock"
    settings.LOOP_MODELS = []
    cache.clear()
    context_for(alice)  # her workspace, as after her first visit
    loaded = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    return loaded


def test_every_answer_conforms_to_the_document(schema, alice_key):
    failures: dict[str, str] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14  # runs, conversations, files, memories, tools, models
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failure = failure_of(operation, mode, {"Authorization": f"Bearer {alice_key}"})
            if failure:
                failures[f"{operation.label} ({mode.value})"] = failure
    assert failures == {}, "\n\n".join(f"{label}: {text}" for label, text in failures.items())


def failure_of(operation: Any, mode: GenerationMode, headers: dict[str, str]) -> str:
    """The first check the operation fails on the requests generated in `mode` (valid ones, or
    ones the document says are not), or ''."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    def sent(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        sent()
    except (Exception, BaseExceptionGroup) as error:  # reported with every other operation's
        return f"{type(error).__name__}: {error}"[:3000]
    return ""
