"""The pure parts of traces: which convention the environment selects, a run's ids (the same in
every process that shares the site's secret, apart for each run and attempt), and a caller's
`traceparent` made current for the request that starts a run."""

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from opentelemetry import trace

from tracing.conventions import LATEST, PINNED, convention
from tracing.ids import RunIds, attempt_span_id, run_trace_id, starting_attempt
from tracing.middleware import caller_trace_context

pytestmark = pytest.mark.fast


def test_the_pinned_convention_unless_the_latest_experimental_one_is_opted_into():
    assert convention([]) is PINNED
    assert convention(["http"]) is PINNED
    assert convention(["http", "gen_ai_latest_experimental"]) is LATEST
    assert PINNED.schema_url == "https://opentelemetry.io/schemas/1.36.0"
    assert (PINNED.provider, LATEST.provider) == ("gen_ai.system", "gen_ai.provider.name")


def test_a_run_s_ids_follow_from_the_run_its_attempt_and_the_site_s_secret(settings):
    assert run_trace_id(7) == run_trace_id(7) != run_trace_id(8)
    assert attempt_span_id(7, 1) != attempt_span_id(7, 2)
    assert 0 < run_trace_id(7) < 2**128
    assert 0 < attempt_span_id(7, 1) < 2**64
    before = run_trace_id(7)
    settings.SECRET_KEY = "another site's secret"
    assert run_trace_id(7) != before


def test_only_the_span_an_attempt_starts_takes_the_run_s_ids():
    ids = RunIds()
    with starting_attempt(7, 3):
        assert ids.generate_trace_id() == run_trace_id(7)
        assert ids.generate_span_id() == attempt_span_id(7, 3)
        assert ids.generate_span_id() != attempt_span_id(7, 3)  # the next span: its own
    assert ids.generate_trace_id() != run_trace_id(7)


def test_a_caller_s_traceparent_is_the_current_span_while_its_request_is_served():
    seen = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(trace.get_current_span().get_span_context())
        return HttpResponse()

    served = caller_trace_context(view)
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    served(RequestFactory().post("/api/v1/runs", HTTP_TRACEPARENT=caller))
    served(RequestFactory().post("/api/v1/runs"))

    assert trace.format_trace_id(seen[0].trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace.format_span_id(seen[0].span_id) == "00f067aa0ba902b7"
    assert not seen[1].is_valid
    assert not trace.get_current_span().get_span_context().is_valid  # detached after
