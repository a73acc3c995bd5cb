"""The chat's pages and actions: each user sees and acts on only their own conversations."""

from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, Conversation
from agent.queue import WORK_RUN
from agent.runs import new_conversation, start_run
from agent.selectors import Logged
from chat.rendering import markdown, page_cards
from core.events import EndCause, HaltReason, RunFinished, RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
EVIL = (
    "Done.\n\n<script>alert('x')</script>\n\n<img src=x onerror=alert('y')>\n\n"
    "[click me](javascript:alert('z')) and <a href=\"javascript:alert('w')\">this</a>"
)


@pytest.fixture
def as_alice(client, alice) -> Client:
    client.force_login(alice)
    return client


class ActiveParts(HTMLParser):
    """Whatever in a page could run: script elements (but the page's own static scripts),
    event handler attributes, and javascript: URLs."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and not (values.get("src") or "").startswith("/static/"):
            self.found.append(f"<script> {values}")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"{tag} {name}={value}")
            if (value or "").replace(" ", "").lower().startswith("javascript:"):
                self.found.append(f"{tag} {name}={value}")


def alice_run(alice, task: str = "What is 17 * 23?") -> AgentRun:
    return start_run(alice, task, model="mock", conversation=new_conversation(alice))


def test_the_home_page_offers_suggestions_and_says_the_model_is_a_mock(as_alice):
    page = as_alice.get("/").text
    assert f'value="{DEMO}"' in page
    assert "model: mock" in page
    assert "a mock" in page
    assert 'aria-live="polite"' in page
    assert 'ws-connect="/ws/runs/"' in page


def test_the_first_task_stores_a_conversation_and_queues_its_run(as_alice, alice):
    response = as_alice.post("/send/", {"task": DEMO})
    conversation = Conversation.objects.get(owner=alice)
    assert response.url == f"/c/{conversation.pk}/"
    run = AgentRun.objects.get(conversation=conversation)
    assert (run.task, run.status) == (DEMO, RunStatus.QUEUED)
    # Its one job, whatever other jobs the database holds (a worker's periodic recovery, say).
    [job] = ProcrastinateJob.objects.filter(args__run_id=run.pk)
    assert (job.id, job.task_name, job.args) == (run.job_id, WORK_RUN, {"run_id": run.pk})
    page = as_alice.get(response.url).text
    assert conversation.title in page
    assert f'data-run="{run.pk}" data-seq="0" data-watch' in page


def test_the_first_task_is_stored_in_one_transaction_of_few_statements(as_alice, alice):
    """Its conversation is made named and on its model, its run follows no turn, and the send
    takes no savepoint and no second look at the conversation it just made."""
    with CaptureQueriesContext(connection) as queries:
        as_alice.post("/send/", {"task": DEMO})
    run = AgentRun.objects.get(conversation__owner=alice)
    assert (run.conversation.title, run.conversation.model) == (DEMO, run.conversation.model)
    assert run.conversation.model.endswith(run.model)
    assert run.parent_id is None
    statements = [query["sql"] for query in queries.captured_queries]
    # The test's own transaction makes the send's a savepoint: one, and no other within it.
    assert len([sql for sql in statements if "SAVEPOINT" in sql]) == 2
    assert sum('FROM "agent_conversation"' in sql for sql in statements) == 0
    # Two of them: the send counted against the person's rate, and the run's start charged to
    # the ledger (quotas); with no quota, no lock and no sum. One more: the person's rights, read
    # once for the page's models and the run's record (rights.middleware).
    assert sum('FROM "rights_grouprights"' in sql for sql in statements) == 1
    assert len(statements) <= 14


def test_a_task_sent_with_htmx_answers_the_new_turn(as_alice, alice):
    conversation = new_conversation(alice)
    response = as_alice.post(
        f"/c/{conversation.pk}/send/", {"task": "What is 17 * 23?"}, headers={"HX-Request": "true"}
    )
    run = AgentRun.objects.get(conversation=conversation)
    assert f'id="run-{run.pk}"' in response.text
    assert "What is 17 * 23?" in response.text
    assert "Stop" in response.text


def test_one_run_more_than_the_limit_is_refused_with_the_reason(as_alice, alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 2
    as_alice.post("/send/", {"task": "What is 1 + 1?"})
    as_alice.post("/send/", {"task": "What is 2 + 2?"})
    refused = as_alice.post("/send/", {"task": "What is 3 + 3?"})
    assert refused.status_code == 400
    assert "You have 2 runs going" in refused.text
    assert AgentRun.objects.count() == 2
    assert Conversation.objects.count() == 2  # no conversation kept for the refused run
    # Into a conversation whose run is going, a task waits its turn: no run more, no refusal.
    conversation = Conversation.objects.first()
    htmx = as_alice.post(
        f"/c/{conversation.pk}/send/", {"task": "What is 3 + 3?"}, headers={"HX-Request": "true"}
    )
    assert "HX-Retarget" not in htmx.headers
    assert "Queued" in htmx.text
    assert "What is 3 + 3?" in htmx.text
    assert AgentRun.objects.count() == 2


def test_an_empty_task_is_refused(as_alice):
    response = as_alice.post("/send/", {"task": "   "})
    assert response.status_code == 400
    assert "The task is empty" in response.text
    assert not AgentRun.objects.exists()


def test_a_post_without_a_csrf_token_is_refused(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/send/", {"task": DEMO}).status_code == 403
    run = alice_run(alice)
    assert client.post(f"/runs/{run.pk}/stop/").status_code == 403
    assert not AgentRun.objects.exclude(pk=run.pk).exists()


def test_another_user_s_conversation_and_run_are_404_on_every_url(client, alice, bob):
    run = alice_run(alice)
    conversation = run.conversation
    client.force_login(bob)
    assert client.get(f"/c/{conversation.pk}/").status_code == 404
    assert client.get(f"/runs/{run.pk}/").status_code == 404
    for url in (
        f"/c/{conversation.pk}/send/",
        f"/c/{conversation.pk}/rename/",
        f"/c/{conversation.pk}/delete/",
        f"/runs/{run.pk}/stop/",
    ):
        assert client.post(url, {"task": "mine", "title": "mine"}).status_code == 404, url
    conversation.refresh_from_db()
    run.refresh_from_db()
    assert (conversation.title, conversation.deleted_at) == ("What is 17 * 23?", None)
    assert run.cancel_requested_at is None
    assert AgentRun.objects.count() == 1
    assert f"/c/{conversation.pk}/" not in client.get("/").text  # not in bob's sidebar


def test_stop_asks_the_run_to_stop(as_alice, alice):
    run = alice_run(alice)
    response = as_alice.post(f"/runs/{run.pk}/stop/", headers={"HX-Request": "true"})
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED  # it had not started yet
    assert "Stop" not in response.text


def test_rename_and_delete(as_alice, alice):
    run = alice_run(alice)
    conversation = run.conversation
    as_alice.post(f"/c/{conversation.pk}/rename/", {"title": "Arithmetic"})
    assert "Arithmetic" in as_alice.get("/").text
    assert as_alice.post(f"/c/{conversation.pk}/delete/").url == "/"
    assert as_alice.get(f"/c/{conversation.pk}/").status_code == 404
    assert as_alice.get(f"/runs/{run.pk}/").status_code == 404
    assert "Arithmetic" not in as_alice.get("/").text
    assert AgentRun.objects.filter(pk=run.pk).exists()  # kept for operators


def test_the_page_shows_each_step_and_the_answer(as_alice, alice, workspaces):
    run = execute_run(alice_run(alice, DEMO))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    for tool in ("run_code", "read_file", "write_file"):
        assert f'<strong class="tool-name">{tool}</strong>' in page
    assert "print(sum(range(1, 100 + 1)))" in page
    assert "bubblewrap" in page
    assert "The sum of 1..100 is 5050. I saved it to sum.txt." in page
    assert f'data-run="{run.pk}" data-seq="{run.events.count()}" hidden' in page  # not watched


def test_a_halted_run_shows_one_banner_saying_why_and_what_to_do(as_alice, alice, workspaces):
    run = execute_run(alice_run(alice, "Keep reading missing.txt until it exists"))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert page.count('class="end-banner') == 1
    assert 'class="card banner' not in page  # no card of its own for the trip or the halt
    assert "Halted: read_file failed 3 times in a row: missing.txt does not exist" in page
    assert "halts it again at once" in page  # going on unchanged would trip it again


def test_model_output_and_tool_results_render_inert(as_alice, alice, workspaces):
    (workspaces / str(alice.pk)).mkdir(parents=True, exist_ok=True)
    (workspaces / str(alice.pk) / "evil.md").write_text(EVIL)
    run = alice_run(alice, "Read evil.md")
    execute_run(run, llm=ScriptedLLM([call("read_file", {"path": "evil.md"}), answer(EVIL)]))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    # The result and the answer show it as text, and the answer's Markdown (what Copy copies)
    # holds it as an escaped attribute.
    assert page.count("&lt;script&gt;alert(") == 3
    assert ActiveParts(page).found == []


def test_markdown_keeps_formatting_and_drops_what_could_run():
    assert (
        markdown("**5050** in `sum.txt`")
        == "<p><strong>5050</strong> in <code>sum.txt</code></p>\n"
    )
    assert ActiveParts(markdown(EVIL)).found == []
    assert ActiveParts(markdown('<a href="javascript:alert(1)">x</a>')).found == []
    assert "href" not in markdown("[x](javascript:alert(1))")
    assert 'href="https://example.com"' in markdown("[x](https://example.com)")
    assert 'rel="noopener noreferrer nofollow"' in markdown("[x](https://example.com)")


def finished(**fields: object) -> RunFinished:
    return RunFinished(
        **{"status": RunStatus.HALTED, "answer": "", "halt_reason": HaltReason.DEADLINE} | fields
    )


def test_a_run_halted_because_the_provider_was_too_slow_does_not_blame_the_task():
    slow = finished(
        error="The model provider did not answer in time: Groq did not finish.",
        cause=EndCause.MODEL_TOO_SLOW,
    )
    [card] = page_cards(1, [Logged(seq=9, event=slow)])
    assert "did not answer in time" in card.data["banner"]["next"]
    assert "refine the task" not in card.data["banner"]["next"].lower()
    assert "Continue it later" in card.data["banner"]["next"]


def test_what_a_person_is_told_to_do_follows_the_runs_cause_not_the_words_of_its_error():
    def step(**fields: object) -> str:
        [card] = page_cards(1, [Logged(seq=9, event=finished(**fields))])
        return card.data["banner"]["next"]

    down = {"status": RunStatus.FAILED, "halt_reason": None, "error": "Groq answered 503"}
    assert "Continue it once the provider is back" in step(**down, cause=EndCause.MODEL_DOWN)
    worded = down | {"error": "Model failed: Groq answered 503"}  # the words, without the cause
    assert "Continue it once the provider is back" not in step(**worded)
    assert "Continue it later" not in step(error="The model provider did not answer in time")


def test_a_run_that_used_up_its_own_time_is_told_to_continue_or_refine_the_task():
    [card] = page_cards(1, [Logged(seq=9, event=finished())])
    assert "Continue it to go on with a fresh set of limits" in card.data["banner"]["next"]
    assert "refine the task" in card.data["banner"]["next"]
