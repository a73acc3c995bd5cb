"""Issue 28's findability and first-visit rough edges, from the server's side: the sidebar's search
(titles and tasks) and date groups, full titles on hover, a skip link and a <main> on every page,
each turn named apart, the quota in one kind of unit and asked again alone, the operator's note in
the console and not in the people's header, a waiting sign-up told so at login, the approval
message's count, My data's checkbox with its label. The browser's side is
tests/test_browser_access.py."""

import os
import re
import subprocess
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation, start_run
from chat.sidebar import groups_for, span_of
from core.events import RunStatus
from tests.conftest import PASSWORD, PROJECT_DIR
from workspace.templatetags.sizes import size

pytestmark = pytest.mark.django_db

SIGNUPS = reverse("admin:accounts_signup_changelist")


def finished_run(user: User, task: str, conversation: Conversation) -> AgentRun:
    """A run sent and ended (a person has few runs going at once)."""
    run = start_run(user, task, model="mock", conversation=conversation)
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    return run


def conversation_of(user: User, title: str, task: str, days_ago: int = 0) -> Conversation:
    conversation = new_conversation(user)
    finished_run(user, task, conversation)
    when = timezone.now() - timedelta(days=days_ago)
    Conversation.objects.filter(pk=conversation.pk).update(title=title, updated_at=when)
    return conversation


def sidebar_titles(html: str) -> list[str]:
    return re.findall(r'<span class="title">([^<]*)</span>', html)


def test_search_finds_conversations_by_title_and_by_any_task_and_only_the_persons(alice, bob):
    lisbon = conversation_of(alice, "Travel plans", "My favourite city is Lisbon")
    conversation_of(alice, "Lisbon weather", "Is it sunny?")
    conversation_of(alice, "Arithmetic", "What is 17 * 23?")
    conversation_of(bob, "Bob in Lisbon", "Lisbon again")
    client = Client()
    client.force_login(alice)

    found = client.get(reverse("chat:search"), {"q": "lisBON"}, headers={"HX-Request": "true"})
    assert found.status_code == 200
    assert sorted(sidebar_titles(found.text)) == ["Lisbon weather", "Travel plans"]
    assert "<html" not in found.text  # the list alone, for htmx to swap in

    # The same search without JavaScript: the whole page, its sidebar filtered.
    page = client.get(reverse("chat:search"), {"q": "lisbon"}).text
    assert sorted(sidebar_titles(page)) == ["Lisbon weather", "Travel plans"]
    assert 'value="lisbon"' in page
    nothing = client.get(reverse("chat:search"), {"q": "Paris"}, headers={"HX-Request": "true"})
    assert "No conversation has “Paris” in its title or its tasks." in nothing.text
    # The conversation the person is in stays marked as current in the results.
    current = client.get(
        reverse("chat:search"), {"q": "city", "current": lisbon.pk}, headers={"HX-Request": "true"}
    )
    assert 'aria-current="page"' in current.text


def test_the_sidebar_groups_conversations_by_the_day_they_were_last_used(alice):
    for title, days_ago in [("now", 0), ("last night", 1), ("monday", 4), ("long ago", 30)]:
        conversation_of(alice, title, "A task", days_ago)
    groups = groups_for(alice)
    assert [(g.label, [c.title for c in g.conversations]) for g in groups] == [
        ("Today", ["now"]),
        ("Yesterday", ["last night"]),
        ("Last 7 days", ["monday"]),
        ("Older", ["long ago"]),
    ]
    page = Client()
    page.force_login(alice)
    html = page.get("/").text
    headings = re.findall(r'<h2 class="group" id="group-\d+">([^<]*)</h2>', html)
    assert headings == ["Today", "Yesterday", "Last 7 days", "Older"]


def test_day_spans_at_their_edges():
    today = timezone.localdate()
    assert span_of(today, today) == "Today"
    assert span_of(today - timedelta(days=1), today) == "Yesterday"
    assert span_of(today - timedelta(days=6), today) == "Last 7 days"
    assert span_of(today - timedelta(days=7), today) == "Older"


def test_a_long_title_is_whole_on_hover_in_the_sidebar_and_the_header(alice):
    title = "What is my favourite city, asked for the fourth time this week?"
    conversation = conversation_of(alice, title, "What is my favourite city?")
    client = Client()
    client.force_login(alice)
    html = client.get(f"/c/{conversation.pk}/").text
    assert f'title="{title}"' in html.split('<nav class="sidebar"')[1].split("</nav>")[0]
    assert f'<h1 class="title" title="{title}">' in html


def test_every_turn_has_a_name_of_its_own(alice):
    conversation = new_conversation(alice)
    for _ in range(2):
        finished_run(alice, "Count slowly to 8", conversation)
    client = Client()
    client.force_login(alice)
    html = client.get(f"/c/{conversation.pk}/").text
    names = re.findall(r'<section class="turn" id="run-\d+" aria-label="([^"]*)"', html)
    assert len(names) == 2
    assert len(set(names)) == 2
    assert all("Count slowly to 8" in name for name in names)


@pytest.mark.parametrize("path", ["/", "/files/", "/memories/", "/accounts/data/"])
def test_every_page_has_a_skip_link_to_its_main(as_alice, workspaces, path):
    html = as_alice.get(path).text
    assert '<a class="skip-link" href="#main">Skip to the main content</a>' in html
    assert len(re.findall(r'<main[^>]* id="main"', html)) == 1


def test_the_login_page_has_a_skip_link_too(client):
    html = client.get("/accounts/login/").text
    assert 'href="#main"' in html
    assert re.search(r'<main[^>]* id="main"', html)


def test_sizes_are_decimal_with_decimal_units():
    assert [size(n) for n in (0, 1, 999, 1234, 10 * 1024 * 1024, 200_000_000, 3 * 10**12)] == [
        "0\xa0bytes",
        "1\xa0byte",
        "999\xa0bytes",
        "1.2\xa0kB",
        "10\xa0MB",
        "200\xa0MB",
        "3\xa0TB",
    ]


def test_the_quota_reads_in_the_units_it_is_set_in_and_can_be_asked_again_alone(
    as_alice, alice, workspaces, settings
):
    settings.LOOP_WORKSPACE_MAX_BYTES = 200_000_000
    page = as_alice.get("/").text
    assert "0\xa0bytes of 200\xa0MB" in page
    assert "190.7" not in page
    from tools.context import context_for

    (context_for(alice).workspace / "sum.txt").write_text("5050\n" * 300)  # a run wrote it
    fragment = as_alice.get(reverse("files_quota"))
    assert fragment.status_code == 200
    assert "1.5\xa0kB of 200\xa0MB" in fragment.text
    assert '<p class="quota" id="quota"' in fragment.text
    assert "<html" not in fragment.text


def test_the_peoples_header_has_no_operator_note_and_the_console_does(as_alice, operator, client):
    header = as_alice.get("/").text.split('<header class="conversation-head">')[1]
    header = header.split("</header>")[0]
    assert "LOOP_OPENAI_BASE_URL" not in header
    assert "docs/models.md" not in header
    assert "model: mock" in header
    console = client.get("/admin/").text
    assert 'id="model-note"' in console
    assert "LOOP_OPENAI_BASE_URL" in console


def test_the_console_has_no_model_note_when_a_model_server_is_set(operator, client, settings):
    settings.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LOOP_OPENAI_MODEL = "qwen3:8b"
    settings.LOOP_MODEL = ""
    assert 'id="model-note"' not in client.get("/admin/").text


def waiting_person() -> User:
    return User.objects.create_user("newcomer", password=PASSWORD, is_active=False)


def test_a_person_waiting_for_approval_is_told_so_at_login(client):
    waiting_person()
    response = client.post("/accounts/login/", {"username": "newcomer", "password": PASSWORD})
    assert response.status_code == 200
    assert "Your sign-up is waiting for approval" in response.text
    assert "Please enter a correct username and password" not in response.text
    assert "_auth_user_id" not in client.session


def test_a_wrong_password_for_a_waiting_account_says_nothing_of_it(client):
    waiting_person()
    response = client.post("/accounts/login/", {"username": "newcomer", "password": "guess 123"})
    assert "Please enter a correct username and password" in response.text
    assert "waiting for approval" not in response.text


def test_a_deactivated_account_is_not_told_it_waits(client):
    former = User.objects.create_user("former", password=PASSWORD)
    former.last_login = timezone.now()
    former.is_active = False
    former.save()
    response = client.post("/accounts/login/", {"username": "former", "password": PASSWORD})
    assert "waiting for approval" not in response.text
    assert "Please enter a correct username and password" in response.text


def test_approving_says_how_many_were_approved_and_never_a_negative_rest(client, operator):
    first, second = waiting_person(), User.objects.create_user("another", is_active=False)
    response = client.post(
        SIGNUPS, {"action": "approve", "_selected_action": [first.pk, second.pk]}, follow=True
    )
    assert "Approved 2 sign-ups." in response.text
    assert "were not waiting" not in response.text
    # From the accounts' page, an account that was not waiting is counted as such.
    third = User.objects.create_user("third", is_active=False)
    active = User.objects.create_user("active")
    response = client.post(
        "/admin/auth/user/", {"action": "approve", "_selected_action": [third.pk, active.pk]},
        follow=True,
    )  # fmt: skip
    assert "Approved 1 sign-up. 1 selected were not waiting for approval" in response.text


def test_my_datas_checkbox_is_labelled_and_sits_with_its_label(as_alice):
    html = as_alice.get("/accounts/data/").text
    assert '<input type="checkbox" id="understood" name="understood" required>' in html
    assert '<label for="understood">I understand this cannot be undone.</label>' in html


def model_note(**env: str) -> str:
    """What `make run`'s banner says of the model, with these settings in the environment."""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("LOOP_OPENAI_BASE_URL", "GROQ_API_KEY")
    }
    done = subprocess.run(
        ["make", "-s", "model-note"], cwd=PROJECT_DIR, env={**clean, **env},  # noqa: S607
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def test_make_runs_banner_tells_the_operator_about_the_mock():
    assert "Model: the built-in mock" in model_note()
    assert "LOOP_OPENAI_BASE_URL" in model_note()
    assert model_note(LOOP_OPENAI_BASE_URL="http://127.0.0.1:11434/v1") == ""
    assert model_note(GROQ_API_KEY="gsk_test") == ""
