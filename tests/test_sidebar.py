"""Issue 40's sidebar, from the server's side: a conversation pinned, archived, renamed, deleted
and exported from its menu, only by its owner; and the list read a page at a time, so the chat
page costs the same queries and draws the same number of conversations with 5 or 200 of them,
while search still finds every one. The browser's side is tests/test_browser_sidebar.py."""

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation, new_version, start_run, submit_run
from chat.sidebar import PAGE_SIZE, Cursor
from core.events import RunStatus
from engine.execution import execute_run
from tests.test_conversations import told_teal

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
HTMX = {"HX-Request": "true"}


def sidebar_titles(html: str) -> list[str]:
    nav = html.split('<nav class="sidebar"')[1].split("</nav>")[0] if "<nav" in html else html
    return re.findall(r'<span class="title">([^<]*)</span>', nav)


def headings(html: str) -> list[str]:
    return re.findall(r'<h2 class="group" id="group-\d+">([^<]*)</h2>', html)


def conversation_of(user: User, title: str, minutes_ago: int = 0) -> Conversation:
    conversation = new_conversation(user, title)
    run = start_run(user, f"A task of {title}", model="mock", conversation=conversation)
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    when = timezone.now() - timedelta(minutes=minutes_ago)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=when)
    return Conversation.objects.get(pk=conversation.pk)


def many_conversations(user: User, count: int) -> None:
    """`count` conversations made in one statement, "Number 0" the newest, a minute apart."""
    now = timezone.now()
    Conversation.objects.bulk_create(
        Conversation(owner=user, title=f"Number {n}") for n in range(count)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_conversation SET updated_at = %s - (split_part(title, ' ', 2)::int "
            "* interval '1 minute') WHERE owner_id = %s AND title LIKE 'Number %%'",
            [now, user.pk],
        )


# Pin, archive, rename, delete ----------------------------------------------------------------


def test_a_pinned_conversation_heads_the_list_in_its_own_group_and_keeps_its_place_by_use(
    as_alice, alice
):
    conversation_of(alice, "Fresh", 1)
    old = conversation_of(alice, "Old favourite", 60 * 24 * 30)
    used = old.updated_at
    response = as_alice.post(reverse("chat:pin", args=[old.pk]), {"pinned": "1"})
    assert response.status_code == 302
    assert response.url == reverse("chat:home")
    page = as_alice.get("/").text
    assert headings(page) == ["Pinned", "Today"]
    assert sidebar_titles(page) == ["Old favourite", "Fresh"]
    menu = as_alice.get(reverse("chat:menu", args=[old.pk]), headers=HTMX).text
    assert ">Unpin</button>" in menu
    old.refresh_from_db()
    assert old.pinned_at is not None
    assert old.updated_at == used  # pinning is not using it

    as_alice.post(reverse("chat:pin", args=[old.pk]), {"pinned": "0"})
    page = as_alice.get("/").text
    assert headings(page) == ["Today", "Older"]
    assert sidebar_titles(page) == ["Fresh", "Old favourite"]


def test_an_archived_conversation_leaves_the_list_for_the_archived_view_and_comes_back(
    as_alice, alice
):
    kept = conversation_of(alice, "Kept")
    done = conversation_of(alice, "Done with", 5)
    response = as_alice.post(
        reverse("chat:archive", args=[done.pk]), {"archived": "1", "current": kept.pk}
    )
    assert response.url == reverse("chat:conversation", args=[kept.pk])  # where the person was
    page = as_alice.get(response.url).text
    assert sidebar_titles(page) == ["Kept"]
    assert f'href="{reverse("chat:archived")}"' in page

    archived = as_alice.get(reverse("chat:archived")).text
    assert sidebar_titles(archived) == ["Done with"]
    menu = as_alice.get(reverse("chat:menu", args=[done.pk]), headers=HTMX).text
    assert ">Unarchive</button>" in menu
    # Search in the archived view searches the archived ones.
    found = as_alice.get(reverse("chat:search"), {"q": "done", "archived": "1"}, headers=HTMX)
    assert sidebar_titles(found.text) == ["Done with"]
    assert (
        sidebar_titles(as_alice.get(reverse("chat:search"), {"q": "done"}, headers=HTMX).text) == []
    )
    # It still opens, as a link to it would.
    assert as_alice.get(reverse("chat:conversation", args=[done.pk])).status_code == 200

    response = as_alice.post(reverse("chat:archive", args=[done.pk]), {"archived": "0"})
    assert response.url == reverse("chat:archived")
    assert sidebar_titles(as_alice.get("/").text) == ["Kept", "Done with"]


def test_rename_and_delete_from_the_sidebar_return_to_the_conversation_the_person_is_in(
    as_alice, alice
):
    here = conversation_of(alice, "Here")
    other = conversation_of(alice, "Other", 5)
    menu = as_alice.get(reverse("chat:menu", args=[other.pk]), {"current": here.pk}, headers=HTMX)
    assert f'id="rename-{other.pk}"' in menu.text
    assert 'data-confirm="Delete “Other”?' in menu.text
    assert f'name="current" value="{here.pk}"' in menu.text

    response = as_alice.post(
        reverse("chat:rename", args=[other.pk]), {"title": "Renamed", "current": here.pk}
    )
    assert response.url == reverse("chat:conversation", args=[here.pk])
    assert "Renamed" in sidebar_titles(as_alice.get(response.url).text)

    response = as_alice.post(reverse("chat:delete", args=[other.pk]), {"current": here.pk})
    assert response.url == reverse("chat:conversation", args=[here.pk])
    assert sidebar_titles(as_alice.get(response.url).text) == ["Here"]
    # Deleting the conversation the person is in leaves for a new one.
    response = as_alice.post(reverse("chat:delete", args=[here.pk]), {"current": here.pk})
    assert response.url == reverse("chat:home")


def test_a_menu_is_asked_for_when_opened_and_holds_every_action(as_alice, alice):
    mine = conversation_of(alice, "Mine")
    page = as_alice.get("/").text
    assert f'hx-get="{reverse("chat:menu", args=[mine.pk])}"' in page
    assert reverse("chat:pin", args=[mine.pk]) not in page  # not drawn with the page
    menu = as_alice.get(reverse("chat:menu", args=[mine.pk]), headers=HTMX).text
    for name in ("chat:pin", "chat:archive", "chat:rename", "chat:delete"):
        assert f'action="{reverse(name, args=[mine.pk])}"' in menu
    for kind in ("md", "json"):
        assert f'href="{reverse("chat:export", args=[mine.pk, kind])}" download' in menu


def test_another_person_gets_no_menu_of_a_conversation(alice, bob):
    theirs = conversation_of(alice, "Alice's")
    mallory = Client()
    mallory.force_login(bob)
    assert mallory.get(reverse("chat:menu", args=[theirs.pk]), headers=HTMX).status_code == 404


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("chat:pin", {"pinned": "1"}),
        ("chat:archive", {"archived": "1"}),
        ("chat:rename", {"title": "Mine now"}),
        ("chat:delete", {}),
    ],
)
def test_another_person_cannot_change_a_conversation_from_its_menu(alice, bob, action, data):
    theirs = conversation_of(alice, "Alice's")
    mallory = Client()
    mallory.force_login(bob)
    assert mallory.post(reverse(action, args=[theirs.pk]), data).status_code == 404
    after = Conversation.objects.get(pk=theirs.pk)
    assert (after.title, after.pinned_at, after.archived_at, after.deleted_at) == (
        "Alice's",
        None,
        None,
        None,
    )


@pytest.mark.django_db(transaction=True)  # the remember tool works in a thread of its own
def test_the_sidebar_s_delete_offers_to_forget_what_its_runs_remembered(client, alice, workspaces):
    """The sidebar's Delete offers the header's choice, ticked, with the same count."""
    conversation = told_teal(alice)
    client.force_login(alice)
    menu = client.get(reverse("chat:menu", args=[conversation.pk]), headers=HTMX).text
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).text
    choice = "Also forget what its runs remembered (1 memory)"
    assert choice in menu
    assert choice in page
    assert (
        'name="forget" value="1" checked'
        in menu.split(reverse("chat:delete", args=[conversation.pk]))[1]
    )


def test_a_task_sent_in_an_archived_conversation_brings_it_back_to_the_list(as_alice, alice):
    done = conversation_of(alice, "Done with")
    as_alice.post(reverse("chat:archive", args=[done.pk]), {"archived": "1"})
    assert sidebar_titles(as_alice.get(reverse("chat:home")).text) == []
    start_run(alice, "One more thing", model="mock", conversation=done)
    assert sidebar_titles(as_alice.get(reverse("chat:home")).text) == ["Done with"]
    assert sidebar_titles(as_alice.get(reverse("chat:archived")).text) == []


def test_a_deleted_conversation_cannot_be_pinned_or_archived(as_alice, alice):
    gone = conversation_of(alice, "Gone")
    as_alice.post(reverse("chat:delete", args=[gone.pk]))
    assert as_alice.post(reverse("chat:pin", args=[gone.pk]), {"pinned": "1"}).status_code == 404
    assert (
        as_alice.post(reverse("chat:archive", args=[gone.pk]), {"archived": "1"}).status_code == 404
    )


def test_a_menu_action_returns_to_no_one_elses_conversation(as_alice, alice, bob):
    mine = conversation_of(alice, "Mine")
    theirs = conversation_of(bob, "Bob's")
    response = as_alice.post(
        reverse("chat:pin", args=[mine.pk]), {"pinned": "1", "current": theirs.pk}
    )
    assert response.url == reverse("chat:home")


# Export ----------------------------------------------------------------------------------------


@pytest.fixture
def branched(alice, workspaces) -> tuple[Conversation, AgentRun, AgentRun, AgentRun]:
    """A conversation of two turns worked by the mock (the first with its tools), the second
    then asked again: the chosen branch is the first turn and the second's new version."""
    conversation = new_conversation(alice, "Sums: 1..100 & `more`/..\\secrets")
    first = execute_run(submit_run(alice, DEMO, conversation, model="mock"))
    second = execute_run(submit_run(alice, "What is 17 * 23?", conversation, model="mock"))
    again = execute_run(new_version(alice, second.pk, task="What is 2 * 3?", model="mock"))
    return conversation, first, second, again


def test_a_conversation_exports_as_json_with_its_steps_in_order_on_its_chosen_branch(
    as_alice, branched
):
    conversation, first, second, again = branched
    response = as_alice.get(reverse("chat:export", args=[conversation.pk, "json"]))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == (
        f'attachment; filename="loop-{conversation.pk}-sums-1100-moresecrets.json"'
    )
    export = json.loads(response.content)
    assert export["format"] == "loop.conversation/1"
    assert export["branch"] == "chosen"
    assert [turn["run"] for turn in export["turns"]] == [first.pk, again.pk]
    assert [turn["task"] for turn in export["turns"]] == [DEMO, "What is 2 * 3?"]
    assert export["turns"][1]["other_versions"] == [second.pk]
    assert "5050" in export["turns"][0]["answer"]
    steps = export["turns"][0]["steps"]
    calls = [step for step in steps if step["kind"] == "tool_call"]
    executed = first.tool_executions.order_by("step", "pk").values_list("tool", flat=True)
    assert [call["tool"] for call in calls] == list(executed)
    assert "run_code" in [call["tool"] for call in calls]
    assert any("5050" in call["result"] for call in calls)
    assert all(call["arguments"] for call in calls)


def test_a_conversation_exports_as_markdown_to_read(as_alice, branched):
    conversation, _, second, again = branched
    response = as_alice.get(reverse("chat:export", args=[conversation.pk, "md"]))
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["Content-Disposition"].startswith("attachment; ")
    text = response.content.decode()
    assert text.startswith("# Sums: 1..100 & `more`/..\\secrets\n")
    assert f"## 1. You\n\n{DEMO}\n" in text
    assert "## 2. You\n\nWhat is 2 * 3?\n" in text
    assert "What is 17 * 23?" not in text  # the other branch, named by its number only
    assert f"_Other versions of this turn: run {second.pk}._" in text
    assert "**run_code** (ok)" in text
    assert "### Loop" in text
    assert again.answer in text


def test_an_exported_run_code_step_holds_its_output_as_its_card_shows_it(as_alice, branched):
    """The Markdown shows what the snippet printed, not the report the model read; the JSON holds
    both, the shown output and the raw result."""
    conversation = branched[0]
    text = as_alice.get(reverse("chat:export", args=[conversation.pk, "md"])).content.decode()
    call = text.split("**run_code** (ok)")[1].split("**", 1)[0]
    assert "```\n5050\n```" in call
    assert "exit status" not in text
    assert "--- stdout ---" not in text
    export = json.loads(
        as_alice.get(reverse("chat:export", args=[conversation.pk, "json"])).content
    )
    steps = export["turns"][0]["steps"]
    run_code = next(step for step in steps if step.get("tool") == "run_code")
    assert run_code["output"] == {"text": "5050", "stderr": "", "ended": ""}
    assert run_code["result"].startswith("exit status: 0")
    assert "5050" in run_code["result"]


def test_a_code_fence_holds_text_with_backticks_whole():
    from chat.exports import fenced

    assert fenced("a ``` b") == "````\na ``` b\n````"
    assert fenced("plain", "json") == "```json\nplain\n```"


@pytest.mark.parametrize("kind", ["md", "json"])
def test_another_person_cannot_export_a_conversation(alice, bob, kind):
    theirs = conversation_of(alice, "Alice's")
    mallory = Client()
    mallory.force_login(bob)
    assert mallory.get(reverse("chat:export", args=[theirs.pk, kind])).status_code == 404


def test_an_export_of_an_unknown_kind_is_not_found(as_alice, alice):
    mine = conversation_of(alice, "Mine")
    assert as_alice.get(reverse("chat:export", args=[mine.pk, "html"])).status_code == 404


# The list at any size ------------------------------------------------------------------------


def chat_page_queries(client: Client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        html = client.get("/").text
    return len(queries), html


def test_the_chat_page_costs_the_same_queries_and_draws_one_page_with_5_or_200_conversations(
    alice, bob
):
    many_conversations(alice, 5)
    many_conversations(bob, 200)
    few, many = Client(), Client()
    few.force_login(alice)
    many.force_login(bob)
    chat_page_queries(few)  # the first request of a process reads what it caches
    with_few, few_html = chat_page_queries(few)
    with_many, many_html = chat_page_queries(many)
    assert with_few == with_many
    assert len(sidebar_titles(few_html)) == 5
    assert "More conversations" not in few_html
    assert len(sidebar_titles(many_html)) == PAGE_SIZE
    assert "More conversations" in many_html


def test_more_pages_through_every_conversation_once_in_order(as_alice, alice):
    count = 2 * PAGE_SIZE + 7
    many_conversations(alice, count)
    html = as_alice.get("/").text
    seen = sidebar_titles(html)
    shown_headings = headings(html)
    pages = 1
    while match := re.search(r'hx-get="([^"]*/conversations/more/\?[^"]*)"', html):
        html = as_alice.get(match.group(1).replace("&amp;", "&"), headers=HTMX).text
        assert "<html" not in html
        seen += sidebar_titles(html)
        shown_headings += headings(html)
        pages += 1
    assert pages == 3
    assert seen == [f"Number {n}" for n in range(count)]
    # A group a page ended in goes on under the heading already shown: each day's once.
    assert len(shown_headings) == len(set(shown_headings))


def test_pages_break_ties_by_id_where_conversations_share_a_last_use(as_alice, alice):
    many_conversations(alice, PAGE_SIZE + 10)
    Conversation.objects.filter(owner=alice).update(updated_at=timezone.now())
    html = as_alice.get("/").text
    seen = sidebar_titles(html)
    more = re.search(r'hx-get="([^"]*/conversations/more/\?[^"]*)"', html)
    assert more is not None
    seen += sidebar_titles(as_alice.get(more.group(1).replace("&amp;", "&"), headers=HTMX).text)
    assert sorted(seen) == sorted(f"Number {n}" for n in range(PAGE_SIZE + 10))


def test_search_finds_a_conversation_past_the_first_page(as_alice, alice):
    many_conversations(alice, 3 * PAGE_SIZE)
    found = as_alice.get(reverse("chat:search"), {"q": "Number 149"}, headers=HTMX).text
    assert sidebar_titles(found) == ["Number 149"]


def test_a_cursor_that_is_not_one_reads_as_the_first_page():
    assert Cursor.parse("") is None
    assert Cursor.parse("12-x") is None
    assert Cursor.parse("99999999999999999999999-1") is None
    now = timezone.now()
    assert Cursor.parse(str(Cursor(now, 7))) == Cursor(now, 7)
