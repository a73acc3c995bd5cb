"""What one export may take from the server: it is a POST with the CSRF token (no link on another
site starts one), one at a time per person and LOOP_EXPORTS_AT_ONCE on the site, one per
LOOP_EXPORT_INTERVAL_SECONDS per person, and streamed as it is made: no temporary file, a chunk
at a time, the workspace's files stored rather than deflated."""

import io
import os
import re
import tempfile
import urllib.parse
import urllib.request
import zipfile
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.signals import request_finished
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client

from accounts import my_data
from accounts.models import ExportStart
from agent.models import RunEvent
from agent.runs import start_run
from tests.conftest import wait_for
from tests.socket_harness import WAIT, browser_with, no_traceback, session_cookie

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

PAGE = "/accounts/data/"
EXPORT = "/accounts/data/export/"
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture
def no_interval(settings) -> None:
    settings.LOOP_EXPORT_INTERVAL_SECONDS = 0


def zip_of(response) -> zipfile.ZipFile:
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def started_stream(client: Client):
    """An export whose first bytes were sent, and the rest not yet made: the response, those
    bytes, and the rest to come."""
    response = client.post(EXPORT)
    assert response.status_code == 200
    chunks = iter(response.streaming_content)
    first = next(chunks)
    assert first.startswith(b"PK\x03\x04")
    return response, first, chunks


def closed_by_the_server(response, monkeypatch) -> None:
    """Close the response mid-stream, as a server does when the client goes away, without the
    request_finished signal, which in a test would close the database connection holding the
    test's transaction."""
    with monkeypatch.context() as patch:
        patch.setattr(request_finished, "send", lambda **kwargs: [])
        response.close()


def as_(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_get_of_the_export_exports_nothing(as_alice, alice, workspaces):
    (workspaces / str(alice.pk)).mkdir()
    (workspaces / str(alice.pk) / "notes.txt").write_text("mine")
    response = as_alice.get(EXPORT)
    assert response.status_code == 405
    assert not response.streaming
    assert b"PK" not in response.content
    assert not ExportStart.objects.exists()


def test_the_export_needs_the_csrf_token(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    assert browser.post(EXPORT).status_code == 403
    page = browser.get(PAGE).text
    token = CSRF_FIELD.search(page).group(1)
    assert zip_of(browser.post(EXPORT, {"csrfmiddlewaretoken": token})).testzip() is None


def test_the_page_s_export_is_a_button_in_a_form_that_posts_the_token(as_alice):
    """A real button in a POST form: the keyboard reaches and presses it as any other."""
    page = as_alice.get(PAGE).text
    form = re.search(rf'<form method="post" action="{EXPORT}">(.*?)</form>', page, re.DOTALL)
    assert form is not None
    assert 'name="csrfmiddlewaretoken"' in form.group(1)
    assert re.search(r'<button type="submit"[^>]*>Download my data \(zip\)</button>', form.group(1))
    assert 'method="get"' not in page


def test_a_second_export_of_the_same_person_is_refused_while_the_first_streams(
    as_alice, alice, bob, no_interval
):
    _, first, rest = started_stream(as_alice)
    for device in (as_alice, as_(alice)):
        refused = device.post(EXPORT)
        assert refused.status_code == 409
        assert not refused.streaming
        assert "An export of your data is already under way" in refused.text
        assert f'action="{EXPORT}"' in refused.text
    assert zip_of(as_(bob).post(EXPORT)).testzip() is None  # another person's is not held up
    assert zipfile.ZipFile(io.BytesIO(first + b"".join(rest))).testzip() is None
    assert zip_of(as_alice.post(EXPORT)).testzip() is None  # once the first is sent


def test_an_export_whose_client_went_away_lets_go(as_alice, no_interval, monkeypatch):
    """The server stops sending mid-stream and closes the response, as Django's handlers do
    when the client goes away."""
    first, _, _ = started_stream(as_alice)
    assert as_alice.post(EXPORT).status_code == 409
    closed_by_the_server(first, monkeypatch)
    assert zip_of(as_alice.post(EXPORT)).testzip() is None


@pytest.mark.serial
def test_one_export_per_interval_per_person(as_alice, alice, bob, settings):
    settings.LOOP_EXPORT_INTERVAL_SECONDS = 300
    zip_of(as_alice.post(EXPORT))
    refused = as_alice.post(EXPORT)
    assert refused.status_code == 429
    assert 295 <= int(refused["Retry-After"]) <= 300
    assert "Loop makes one export of your data every 5 minutes" in refused.text
    assert "You can export again in 5 minutes." in refused.text
    assert zip_of(as_(bob).post(EXPORT)).testzip() is None
    ExportStart.objects.filter(user=alice).update(
        started_at=ExportStart.objects.get(user=alice).started_at - timedelta(seconds=290)
    )
    soon = as_alice.post(EXPORT)
    assert soon.status_code == 429
    assert "You can export again in 10 seconds." in soon.text
    ExportStart.objects.filter(user=alice).update(
        started_at=ExportStart.objects.get(user=alice).started_at - timedelta(seconds=10)
    )
    assert zip_of(as_alice.post(EXPORT)).testzip() is None


def test_the_site_makes_no_more_than_so_many_exports_at_once(as_alice, bob, settings, no_interval):
    settings.LOOP_EXPORTS_AT_ONCE = 1
    _, _, rest = started_stream(as_alice)
    as_bob = as_(bob)
    busy = as_bob.post(EXPORT)
    assert busy.status_code == 503
    assert int(busy["Retry-After"]) > 0
    assert "as many exports as it makes at once" in busy.text
    assert not ExportStart.objects.filter(user=bob).exists()  # a refusal is not counted
    b"".join(rest)
    assert zip_of(as_bob.post(EXPORT)).testzip() is None


def test_workspace_files_are_stored_and_the_records_deflated(as_alice, alice, workspaces):
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    (workspace / "zeros.bin").write_bytes(bytes(300_000))  # deflate would make it ~300 bytes
    archive = zip_of(as_alice.post(EXPORT))
    zeros = archive.getinfo("files/zeros.bin")
    assert zeros.compress_type == zipfile.ZIP_STORED
    assert zeros.compress_size == zeros.file_size == 300_000
    assert archive.read("files/zeros.bin") == bytes(300_000)
    for record in ("account.json", "memories.json", "README.txt"):
        assert archive.getinfo(record).compress_type == zipfile.ZIP_DEFLATED


def test_the_zip_is_made_as_it_is_sent_with_no_temporary_file(
    as_alice, alice, workspaces, monkeypatch, tmp_path
):
    """Nothing goes through the temporary directory, and no piece sent is much more than a
    chunk of a file: the zip is never held whole, in memory or on disk."""
    monkeypatch.setattr(my_data, "CHUNK_BYTES", 64 * 1024)
    spare = tmp_path / "temporary"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the export made a temporary file")

    for name in ("TemporaryFile", "NamedTemporaryFile", "SpooledTemporaryFile", "mkstemp"):
        monkeypatch.setattr(tempfile, name, refused)
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    content = os.urandom(1_000_000)
    (workspace / "large.bin").write_bytes(content)
    response = as_alice.post(EXPORT)
    pieces = list(response.streaming_content)
    assert len(pieces) > 1_000_000 // (64 * 1024)
    assert max(map(len, pieces)) <= 64 * 1024 + 1024
    assert zipfile.ZipFile(io.BytesIO(b"".join(pieces))).read("files/large.bin") == content
    assert list(spare.iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_under_daphne_the_zip_streams_and_another_process_s_export_waits_for_it(
    start_daphne, alice, settings
):
    """Through the real server: the export's first bytes arrive while the rest cannot be made
    yet (the event log's table is locked), so the zip is sent as it is made, not read whole
    first; meanwhile an export of the same person in another process is refused; once sent,
    the export lets go."""
    settings.LOOP_EXPORT_INTERVAL_SECONDS = 0
    site = start_daphne(LOOP_EXPORT_INTERVAL_SECONDS="0")
    loose = start_run(alice, "What is 6 * 7?", model="mock")
    browser = browser_with(session_cookie(alice))
    page = browser.open(f"{site.url}{PAGE}", timeout=WAIT).read().decode()
    form = urllib.parse.urlencode({"csrfmiddlewaretoken": CSRF_FIELD.search(page).group(1)})
    blocker = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with blocker.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"LOCK TABLE {RunEvent._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        request = urllib.request.Request(  # noqa: S310 (the live site)
            f"{site.url}{EXPORT}", data=form.encode(), method="POST"
        )
        streaming = browser.open(request, timeout=WAIT)
        assert streaming.read(4) == b"PK\x03\x04"
        elsewhere = as_(alice).post(EXPORT)
        assert elsewhere.status_code == 409
    finally:
        blocker.close()
    archive = zipfile.ZipFile(io.BytesIO(b"PK\x03\x04" + streaming.read()))
    assert archive.testzip() is None
    assert f"runs/{loose.pk}.json" in archive.namelist()

    def accepted() -> bool:
        response = as_(alice).post(EXPORT)
        if response.status_code != 200:
            return False
        b"".join(response.streaming_content)
        return True

    wait_for(accepted, "the sent export to let go")
    no_traceback(site)
