"""My data attacked by a logged-in person: workspace names an unzip program would misread, a run
of someone else's in one of their conversations, a run started while the account is being
deleted, the same account deleted twice at once, and the sessions and sockets of other devices."""

import io
import json
import os
import re
import urllib.parse
import urllib.request
import zipfile

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts import my_data
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from chat.consumers import Close
from core.events import RunStatus
from memory.store import remember
from tests.conftest import PASSWORD
from tests.socket_harness import (
    WAIT,
    browser_with,
    close_code,
    no_traceback,
    open_socket,
    session_cookie,
    watch,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

EXPORT = "/accounts/data/export/"
DELETE = "/accounts/data/delete/"


def exported(client: Client) -> zipfile.ZipFile:
    response = client.post(EXPORT)
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


# A snippet can name a file anything but '/' and NUL: each of these, extracted by a program that
# takes '\' for a folder (as on Windows) or shows names as they are, lands or looks elsewhere.
MISLEADING = {
    "..\\..\\..\\startup.bat": "a backslash",
    "C:evil.txt": "a drive letter",
    "fake\nREADME.txt": "a newline",
    "report\u202etxt.exe": "a bidirectional control",
    "bell\x07.txt": "a control character",
}


def test_a_workspace_name_an_unzip_program_would_misread_is_left_out_and_named(
    as_alice, alice, workspaces
):
    workspace = workspaces / str(alice.pk)
    (workspace / "sub").mkdir(parents=True)
    for name in MISLEADING:
        (workspace / name).write_text("x")
    (workspace / "sub" / "..\\..\\up.txt").write_text("x")
    (workspace / "plain.txt").write_text("kept")
    archive = exported(as_alice)
    files = [name for name in archive.namelist() if name.startswith("files/")]
    assert files == ["files/plain.txt"]
    readme = archive.read("README.txt").decode()
    body = readme.split("Not included:", 1)[1]
    assert "\n                      fake\\nREADME.txt\n" in body
    assert "report\\u202etxt.exe" in body
    assert "bell\\x07.txt" in body
    assert "..\\..\\..\\startup.bat" in body
    assert "sub/..\\..\\up.txt" in body
    assert "\u202e" not in readme
    assert "\x07" not in readme
    assert "\nREADME.txt" not in readme


def test_a_run_of_another_person_in_a_conversation_is_not_exported(as_alice, alice, bob):
    conversation = new_conversation(alice, "Mine")
    mine = start_run(alice, "What is 2 + 2?", model="mock", conversation=conversation)
    theirs = start_run(bob, "bob's secret task", model="mock")
    AgentRun.objects.filter(pk=theirs.pk).update(conversation=conversation)
    archive = exported(as_alice)
    (name,) = [n for n in archive.namelist() if n.startswith("conversations/")]
    runs = json.loads(archive.read(name))["runs"]
    assert [run["run"]["id"] for run in runs] == [mine.pk]
    for name in archive.namelist():
        assert b"bob's secret task" not in archive.read(name), name


def test_a_run_started_while_the_account_is_deleted_is_cancelled_not_handed_over(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    """Another device starts a run after the live runs were listed to stop, before the
    transaction: it must not go on under the placeholder once the account is gone."""
    first = start_run(alice, "What is 6 * 7?", model="mock")
    started: list[AgentRun] = []
    cancel = my_data.request_cancel

    def meanwhile(run: AgentRun) -> AgentRun:
        if not started:
            started.append(start_run(alice, "What is 17 * 23?", model="mock"))
        return cancel(run)

    monkeypatch.setattr(my_data, "request_cancel", meanwhile)
    with django_capture_on_commit_callbacks(execute=True):
        my_data.delete_account(alice, PASSWORD)
    first.refresh_from_db()
    (late,) = started
    late.refresh_from_db()
    assert first.status == RunStatus.CANCELLED
    assert late.status == RunStatus.CANCELLED
    assert late.user.username.startswith("deleted-")


def test_the_same_account_deleted_twice_at_once_makes_one_placeholder(
    alice, bob, django_capture_on_commit_callbacks
):
    """Two devices press Delete together: the second, holding the account as it was read
    before the first committed, is refused and changes nothing more."""
    remember(alice, "Alice likes tea.")
    second = User.objects.get(pk=alice.pk)
    with django_capture_on_commit_callbacks(execute=True):
        my_data.delete_account(alice, PASSWORD)
    placeholders = set(User.objects.filter(username__startswith="deleted-"))
    with pytest.raises(my_data.AccountNotDeleted), django_capture_on_commit_callbacks(execute=True):
        my_data.delete_account(second, PASSWORD)
    assert set(User.objects.filter(username__startswith="deleted-")) == placeholders
    assert len(placeholders) == 1


def test_every_other_device_is_logged_out_too(
    alice, alice_devices, django_capture_on_commit_callbacks
):
    here, elsewhere = alice_devices
    with django_capture_on_commit_callbacks(execute=True):
        assert here.post(DELETE, {"password": PASSWORD}).status_code == 302
    for url in ("/", "/memories/", "/accounts/data/", EXPORT):
        response = elsewhere.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith("/accounts/login/")


@pytest.fixture
def alice_devices(alice) -> tuple[Client, Client]:
    devices = Client(), Client()
    for device in devices:
        device.force_login(alice)
    return devices


CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def delete_through(site, cookie: str) -> None:
    """Delete the account as the browser does: the My data page's form, its token, the
    password."""
    browser = browser_with(cookie)
    page = browser.open(f"{site.url}/accounts/data/", timeout=WAIT).read().decode()
    form = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": CSRF_FIELD.search(page).group(1), "password": PASSWORD}
    )
    request = urllib.request.Request(  # noqa: S310 (the live site)
        f"{site.url}{DELETE}", data=form.encode(), method="POST"
    )
    assert browser.open(request, timeout=WAIT).url.endswith("/accounts/data/deleted/")


@pytest.mark.django_db(transaction=True)
def test_deleting_the_account_closes_its_sockets_on_every_device_at_once(start_daphne, alice):
    """As a logout does, without waiting for an event that may never come: the run watched is
    finished, so nothing the deletion does to runs wakes the sockets."""
    site = start_daphne()
    run = start_run(alice, "What is 6 * 7?", model="mock")
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    leaving, elsewhere = session_cookie(alice), session_cookie(alice)
    with open_socket(site, leaving) as here, open_socket(site, elsewhere) as there:
        for page in (here, there):
            watch(page, run.pk)
            assert f'data-run="{run.pk}"' in page.recv(timeout=WAIT)
        delete_through(site, leaving)
        assert close_code(here) == Close.SIGNED_OUT
        assert close_code(there) == Close.SIGNED_OUT
    assert not User.objects.filter(pk=alice.pk).exists()
    no_traceback(site)


def test_names_that_read_the_same_once_decoded_make_one_entry_and_a_note(
    as_alice, alice, workspaces
):
    """Two names that are not UTF-8 both read as U+FFFD: the zip holds one, never a second
    entry of the same name (which an unzip program writes over the first)."""
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    for raw in (b"\xff.txt", b"\xfe.txt"):
        (workspace / os.fsdecode(raw)).write_bytes(raw)
    archive = exported(as_alice)
    assert [n for n in archive.namelist() if n.startswith("files/")] == ["files/\ufffd.txt"]
    assert "\n                      \ufffd.txt" in archive.read("README.txt").decode()
