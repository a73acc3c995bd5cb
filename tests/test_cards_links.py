"""The chat's cards lead to what a run worked on: a read_file or write_file card to the file in the
Files panel, the "N memories recalled" card to those memories on the Memories page; and every
conversation's page leads to Files, Memories and My data.

Cards are drawn from typed events, as the page, the replay and the live push all draw them."""

import html as markup
import json
from urllib.parse import unquote

import pytest
from django.urls import resolve, reverse

from agent.models import RunEvent
from agent.runs import new_conversation, start_run
from chat.rendering import card_for, render_card
from core.events import (
    MemoriesRecalled,
    RunFinished,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)
from core.recalled import RecalledMemory
from core.results import ToolStatus

RUN_ID = 3
FILES_VIEW = "/files/view/"


def call(tool: str, arguments: dict | str, status: ToolStatus = ToolStatus.OK) -> ToolCallFinished:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallFinished(
        step=1,
        call_id="call_1",
        tool=tool,
        arguments=raw,
        status=status,
        text="4 lines" if status is ToolStatus.OK else "ERROR: no such file",
        duration=0.01,
    )


def drawn(event) -> str:
    card = card_for(RUN_ID, 5, event)
    assert card is not None
    return render_card(card)


def file_links(html: str) -> list[str]:
    """The hrefs of a card's links into the Files panel, as the browser reads them."""
    return [
        markup.unescape(part.split('"', 1)[0])
        for part in html.split('href="')[1:]
        if part.startswith(FILES_VIEW)
    ]


# a file tool's card -------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_a_file_tools_card_links_to_its_file(tool):
    html = drawn(
        call(
            tool,
            {"path": "data.csv", "content": "a,b\n"}
            if tool == "write_file"
            else {"path": "data.csv"},
        )
    )
    assert file_links(html) == ["/files/view/data.csv"]
    assert ">Open data.csv</a>" in html


@pytest.mark.parametrize(
    ("path", "url", "shown"),
    [
        ("reports/q1.csv", "/files/view/reports/q1.csv", "reports/q1.csv"),
        ("my notes/a b#1?.txt", "/files/view/my%20notes/a%20b%231%3F.txt", "my notes/a b#1?.txt"),
        ("naïve %41.txt", "/files/view/na%C3%AFve%20%2541.txt", "naïve %41.txt"),
        ("./data.csv", "/files/view/data.csv", "data.csv"),
        ("notes//todo.txt", "/files/view/notes/todo.txt", "notes/todo.txt"),
    ],
)
def test_the_link_is_url_quoted_and_names_the_file_as_the_file_tools_read_it(path, url, shown):
    html = drawn(call("read_file", {"path": path}))
    assert file_links(html) == [url]
    assert opened(url) == shown


def opened(url: str) -> str:
    """The path the Files panel's view is given for a link (the server unquotes the URL)."""
    match = resolve(unquote(url))
    assert match.url_name == "files_view"
    [path] = [*match.args, *match.kwargs.values()]
    return path


def test_the_path_in_the_link_is_escaped_in_the_page():
    html = drawn(call("read_file", {"path": "<b>&'\".txt"}))
    [url] = file_links(html)
    assert "<b>" not in html
    assert opened(url) == "<b>&'\".txt"


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",
        "notes/../../secret.txt",
        "/etc/passwd",
        "C:/Windows/win.ini",
        "notes\\todo.txt",
        "bad\x00name.txt",
        "bad\nname.txt",
        "bad\x7fname.txt",
        "bad\x85name.txt",
        "invoice\u202etxt.exe",
        "notes\u2066/a.txt",
        "",
        ".",
        "./",
    ],
)
def test_no_link_for_a_path_the_file_tools_or_the_files_panel_refuse(path):
    html = drawn(call("read_file", {"path": path}))
    assert file_links(html) == []
    assert FILES_VIEW not in html


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("run_code", {"code": "open('data.csv').read()"}),
        ("list_files", {"path": "reports"}),
        ("web_search", {"query": "data.csv"}),
        ("read_file", "not json"),
        ("read_file", '["data.csv"]'),
        ("read_file", {"path": ["data.csv"]}),
        ("read_file", {}),
    ],
)
def test_no_link_for_other_tools_or_arguments_without_a_path(tool, arguments):
    assert FILES_VIEW not in drawn(call(tool, arguments))


@pytest.mark.parametrize("status", [ToolStatus.ERROR, ToolStatus.DENIED, ToolStatus.TIMEOUT])
def test_no_link_from_a_call_that_failed(status):
    """A read that found no file, or a write that was refused, has no file to open."""
    assert FILES_VIEW not in drawn(call("write_file", {"path": "data.csv", "content": ""}, status))


def test_no_link_while_the_call_is_still_running():
    started = ToolCallStarted(
        step=1, call_id="call_1", tool="write_file", arguments='{"path": "data.csv"}'
    )
    assert FILES_VIEW not in drawn(started)


# the memories card --------------------------------------------------------------------------------


def recalled(count: int) -> MemoriesRecalled:
    return MemoriesRecalled(
        memories=[
            RecalledMemory(id=n, text=f"fact {n}", score=0.5, parts={"similarity": 0.5})
            for n in range(1, count + 1)
        ]
    )


@pytest.mark.parametrize(
    ("count", "words"), [(1, "See it in Memories"), (3, "See them in Memories")]
)
def test_the_memories_card_links_to_the_memories_the_run_recalled(count, words):
    html = drawn(recalled(count))
    assert f'<a class="card-link" href="/memories/?run={RUN_ID}">{words}</a>' in html
    assert reverse("memories") == "/memories/"


def test_other_cards_link_nowhere_new():
    html = drawn(RunFinished(status=RunStatus.SUCCEEDED, answer="data.csv has 4 lines."))
    assert FILES_VIEW not in html
    assert "/memories/" not in html


# the page -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_conversations_page_draws_the_links_of_its_cards(client, alice):
    run = start_run(
        alice, "How many lines are in data.csv?", model="mock", conversation=new_conversation(alice)
    )
    for seq, event in enumerate([recalled(2), call("read_file", {"path": "data.csv"})], start=1):
        RunEvent.objects.create(run=run, seq=seq, kind=event.kind, data=event.as_dict())
    client.force_login(alice)
    page = client.get(f"/c/{run.conversation_id}/").text
    assert f'href="/memories/?run={run.pk}"' in page
    assert 'href="/files/view/data.csv"' in page


@pytest.mark.django_db
@pytest.mark.parametrize("conversation", [False, True])
def test_every_chat_page_leads_to_files_memories_and_my_data(client, alice, conversation):
    client.force_login(alice)
    url = "/"
    if conversation:
        run = start_run(alice, "List my files", model="mock", conversation=new_conversation(alice))
        url = f"/c/{run.conversation_id}/"
    page = client.get(url).text
    for href, words in [
        ("/files/", "Files"),
        ("/memories/", "Memories"),
        ("/accounts/data/", "My data"),
    ]:
        assert f'href="{href}"' in page
        assert words in page


@pytest.mark.django_db
def test_the_sidebar_shows_the_quota_used(client, alice, workspaces):
    (workspaces / str(alice.pk)).mkdir()
    (workspaces / str(alice.pk) / "data.csv").write_bytes(b"x" * 2048)
    client.force_login(alice)
    page = client.get("/").text
    quota = '<p class="quota" id="quota" data-refresh="/files/quota/">'
    assert quota + '<span><a href="/files/">Files</a>:</span>' in page
    assert "2\xa0kB of" in page  # decimal units, as the quota's settings are written


@pytest.mark.django_db
def test_the_chat_stands_when_the_workspace_cannot_be_measured(client, alice, settings, tmp_path):
    """A workspaces directory that cannot be made (here a file stands in its place): the chat
    page still opens, with a plain link to Files instead of the quota."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    settings.LOOP_WORKSPACES_DIR = blocked
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 200
    assert '<a href="/files/">Files</a>' in response.text
    assert 'class="quota"' not in response.text
