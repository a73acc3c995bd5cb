"""A run's events over Server-Sent Events (GET /api/v1/runs/{id}/events), through a real daphne
and a real worker, read by an HTTP client as a program would: the whole run from the start, a
client that drops mid-run and resumes with Last-Event-ID (every later event once, in order,
none missing), ?after=, refusals as JSON, and a stream whose key is revoked closing."""

import pytest

from agent.models import AgentRun
from agent.runs import new_conversation, submit_run
from api.keys import keys_of, prefix_of, revoke
from approvals.models import ApprovalPreference
from core.events import RunStatus
from tests.conftest import wait_for
from tests.sse_client import Sse, Stream

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer
POLL = "0.3"  # seconds between a quiet stream's checks (LOOP_API_POLL_SECONDS)


@pytest.fixture
def site(start_worker, start_daphne, workspaces):
    """A worker whose mock model takes its time (so a run can be left mid-way) and a daphne
    whose streams check their key often."""
    start_worker(LOOP_MOCK_LATENCY_MS="600")
    return start_daphne(LOOP_API_POLL_SECONDS=POLL)


def run_of(person) -> AgentRun:
    return submit_run(person, PRODUCT, new_conversation(person), model="mock")


def events_path(run: AgentRun, query: str = "") -> str:
    return f"/api/v1/runs/{run.pk}/events{query}"


def logged(run: AgentRun) -> list[tuple[int, str, dict]]:
    return list(run.events.order_by("seq").values_list("seq", "kind", "data"))


def stored(messages: list[Sse]) -> list[tuple[int, str, dict]]:
    """The stored events a stream sent, as the log holds them; each message checked whole."""
    found = []
    for message in messages:
        if message.id is None:
            continue
        body = message.json()
        assert message.event == body["kind"]
        assert int(message.id) == body["seq"]
        found.append((body["seq"], body["kind"], body["data"]))
    return found


def read_to_end(stream: Stream) -> list[Sse]:
    messages = list(stream.messages())
    stream.close()
    return messages


def finished(run: AgentRun) -> bool:
    run.refresh_from_db()
    return run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED)


def test_a_whole_run_is_read_from_the_start_then_ends_with_its_status(site, alice, alice_key):
    run = run_of(alice)
    stream = Stream(site.port, events_path(run), alice_key)
    assert stream.status == 200
    assert stream.header("Content-Type").startswith("text/event-stream")
    assert stream.header("Cache-Control") == "no-cache"
    assert stream.header("X-Accel-Buffering") == "no"
    messages = read_to_end(stream)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert stored(messages) == logged(run)
    assert messages[-1].event == "end"
    assert messages[-1].json() == {"status": "succeeded"}
    deltas = [message for message in messages if message.event == "delta"]
    assert all(message.id is None for message in deltas)
    assert {message.event for message in messages} >= {"run_started", "run_finished", "end"}


def test_a_client_that_drops_mid_run_resumes_with_last_event_id_missing_nothing(
    site, alice, alice_key
):
    run = run_of(alice)
    first = Stream(site.port, events_path(run), alice_key)
    had: list[Sse] = []
    for message in first.messages():
        had.append(message)
        if message.event == "tool_call_started":  # mid-run: the model has a turn to go
            break
    first.close()
    last = [message.id for message in had if message.id is not None][-1]

    second = Stream(site.port, events_path(run), alice_key, **{"Last-Event-ID": last})
    rest = read_to_end(second)
    wait_for(lambda: finished(run), "the run to end")

    assert stored(rest), "the second stream got nothing: the run was not left mid-way"
    assert stored(rest)[0][0] == int(last) + 1
    assert stored(had) + stored(rest) == logged(run)  # each once, in order, none missing
    assert rest[-1].event == "end"


def test_after_resumes_a_finished_run_from_a_seq(site, alice, alice_key):
    run = run_of(alice)
    wait_for(lambda: finished(run), "the run to end")
    messages = read_to_end(Stream(site.port, events_path(run, "?after=2"), alice_key))
    assert stored(messages) == logged(run)[2:]
    assert messages[-1].json() == {"status": "succeeded"}


@pytest.mark.parametrize("given", ["abc", "-1", "2147483648", "1.5", "99999999999999999999"])
def test_a_bad_last_event_id_is_refused_as_json(site, alice, alice_key, given):
    run = run_of(alice)
    refused = Stream(site.port, events_path(run), alice_key, **{"Last-Event-ID": given})
    assert refused.status == 400
    assert refused.body()["error"]["code"] == "invalid_last_event_id"


def test_a_bad_after_is_refused_as_json(site, alice, alice_key):
    run = run_of(alice)
    for query in ("?after=-1", "?after=2147483648", "?after=x"):
        refused = Stream(site.port, events_path(run, query), alice_key)
        assert refused.status == 422
        assert refused.body()["error"]["code"] == "invalid_request"


def test_another_persons_run_and_a_missing_one_are_json_404s(site, alice_key, bob):
    bobs = run_of(bob)
    for path in (events_path(bobs), "/api/v1/runs/987654321/events"):
        refused = Stream(site.port, path, alice_key)
        assert refused.status == 404
        assert refused.header("Content-Type").startswith("application/json")
        assert refused.body()["error"]["code"] == "not_found"


def test_a_revoked_keys_open_stream_closes_at_its_next_check(site, alice, alice_key):
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    run = run_of(alice)  # it waits for alice's decision: its stream stays open, quiet
    stream = Stream(site.port, events_path(run), alice_key)
    messages = stream.messages()
    for message in messages:
        if message.comment == "keepalive":  # quiet, waiting, the key still good
            break
    revoke(keys_of(alice), prefix_of(alice_key) or "")
    rest = list(messages)  # ends: the server closed the stream
    stream.close()
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert not [message for message in rest if message.event == "end"]


@pytest.fixture
def tight_site(start_worker, start_daphne, workspaces):
    """A daphne that lets a person hold one stream, for a second at most."""
    start_worker()
    return start_daphne(
        LOOP_API_POLL_SECONDS=POLL, LOOP_API_STREAMS_PER_PERSON="1", LOOP_API_STREAM_SECONDS="1"
    )


def test_a_person_holds_so_many_streams_each_for_so_long(tight_site, alice, alice_key):
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    run = run_of(alice)  # it waits: only the stream's bound ends its stream
    first = Stream(tight_site.port, events_path(run), alice_key)
    messages = first.messages()
    next(messages)
    refused = Stream(tight_site.port, events_path(run), alice_key)
    assert refused.status == 429
    assert refused.body()["error"]["code"] == "too_many_streams"

    rest = list(messages)
    first.close()
    assert rest[-1].event == "timeout"
    assert not [message for message in rest if message.event == "end"]
    again = Stream(tight_site.port, events_path(run), alice_key)  # its slot was given back
    assert again.status == 200
    again.close()
