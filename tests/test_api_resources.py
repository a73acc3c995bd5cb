"""The API's files, memories, tools and models (/api/v1/): each works for a key's person through
the Files panel's and the Memories page's own code, and each limit refuses with its JSON code."""

import os
import types
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from agent.runs import new_conversation, start_run
from approvals.models import ApprovalPreference
from engine.execution import execute_run
from mcp_servers.models import McpServer, McpTool
from memory.models import ForgottenMemory, Memory
from memory.store import remember
from tools.context import context_for

pytestmark = pytest.mark.django_db

API = "/api/v1"
BOUNDARY = "LoopBoundary7MA4YWxk"
FROZEN = 1_800_000_030.0
CSV = b"city,people\nParis,2100000\nLyon,520000\n"
TEAL = "My favourite colour is teal."
CAT = "My cat is called Miso."


@pytest.fixture(autouse=True)
def fresh_rates(monkeypatch):
    """Each test counts its own requests and changes (in the cache), within one minute of the
    rates' clock, half a minute in."""
    frozen = types.SimpleNamespace(time=lambda: FROZEN)
    for module in ("api.auth", "api.memories", "chat.memories"):
        monkeypatch.setattr(f"{module}.time", frozen)
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api(alice_key) -> Client:
    return Client(headers={"Authorization": f"Bearer {alice_key}"})


@pytest.fixture
def workspace(alice, workspaces) -> Path:
    return context_for(alice).workspace


def error_of(response) -> str:
    assert response["Content-Type"] == "application/json; charset=utf-8"
    return response.json()["error"]["code"]


def upload(api: Client, *files: SimpleUploadedFile, folder: str = "", **query: str):
    params = "&".join(f"{key}={value}" for key, value in {"path": folder, **query}.items())
    return api.post(f"{API}/files?{params}", {"file": list(files)})


# Files -------------------------------------------------------------------------------------------


def test_upload_list_download_and_delete(api, workspace):
    (workspace / "inbox").mkdir()
    response = upload(
        api, SimpleUploadedFile("data.csv", CSV), SimpleUploadedFile("b.txt", b"bb"), folder="inbox"
    )
    assert response.status_code == 201, response.content
    assert response.json() == {
        "stored": [
            {
                "path": "inbox/data.csv",
                "size": len(CSV),
                "message": f"Uploaded inbox/data.csv ({len(CSV)} bytes).",
            },
            {"path": "inbox/b.txt", "size": 2, "message": "Uploaded inbox/b.txt (2 bytes)."},
        ],
        "refused": [],
    }
    assert (workspace / "inbox" / "data.csv").read_bytes() == CSV

    listing = api.get(f"{API}/files?path=inbox").json()
    assert listing["path"] == "inbox"
    assert listing["total"] == 2
    by_name = {entry["name"]: entry for entry in listing["entries"]}
    assert by_name["data.csv"]["path"] == "inbox/data.csv"
    assert by_name["data.csv"]["size"] == len(CSV)
    assert by_name["data.csv"]["is_folder"] is False
    root = api.get(f"{API}/files").json()
    assert [(entry["name"], entry["is_folder"]) for entry in root["entries"]] == [("inbox", True)]

    download = api.get(f"{API}/files/inbox/data.csv")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == CSV
    assert download["Content-Disposition"] == 'attachment; filename="data.csv"'
    assert download["Content-Type"] == "application/octet-stream"
    assert download["X-Content-Type-Options"] == "nosniff"

    deleted = api.delete(f"{API}/files/inbox/data.csv")
    assert deleted.json() == {"path": "inbox/data.csv", "message": "Deleted inbox/data.csv."}
    assert not (workspace / "inbox" / "data.csv").exists()
    assert error_of(api.get(f"{API}/files/inbox/data.csv")) == "not_found"


def test_a_page_is_downloaded_never_rendered(api, workspace):
    (workspace / "page.html").write_text("<script>alert(1)</script>")
    download = api.get(f"{API}/files/page.html")
    assert download["Content-Type"] == "application/octet-stream"
    assert download["Content-Disposition"].startswith("attachment")
    assert download["X-Content-Type-Options"] == "nosniff"


def test_a_folder_with_entries_is_deleted_only_with_its_count(api, workspace):
    (workspace / "old").mkdir()
    (workspace / "old" / "a.txt").write_text("a")
    asked = api.delete(f"{API}/files/old")
    assert asked.status_code == 409
    assert error_of(asked) == "folder_not_empty"
    assert "holding 1 entry" in asked.json()["error"]["message"]
    assert (workspace / "old" / "a.txt").exists()
    assert api.delete(f"{API}/files/old?contents=1").status_code == 200
    assert not (workspace / "old").exists()


def test_a_clash_is_refused_unless_replacing_or_keeping_both(api, workspace):
    (workspace / "data.csv").write_bytes(b"old")
    clash = upload(api, SimpleUploadedFile("data.csv", CSV))
    assert clash.status_code == 409
    assert error_of(clash) == "exists"
    assert (workspace / "data.csv").read_bytes() == b"old"
    kept = upload(api, SimpleUploadedFile("data.csv", CSV), on_clash="keep")
    assert kept.json()["stored"][0]["path"] == "data (2).csv"
    replaced = upload(api, SimpleUploadedFile("data.csv", CSV), on_clash="replace")
    assert replaced.status_code == 201
    assert (workspace / "data.csv").read_bytes() == CSV


@pytest.mark.parametrize(
    "path",
    ["../secrets.txt", "/etc/passwd", "a/../../b.txt", "link/x.txt", "a\\b.txt", "bad%01name"],
)
def test_path_tricks_are_refused(api, workspace, path):
    (workspace / "link").symlink_to("/etc")
    for response in (
        api.get(f"{API}/files/{path}"),
        api.delete(f"{API}/files/{path}"),
        api.get(f"{API}/files?path={path}"),
    ):
        assert response.status_code == 400, (path, response.content)
        assert error_of(response) == "bad_path"
    assert os.path.islink(workspace / "link")


def test_an_upload_named_as_a_path_or_into_a_trick_folder_is_refused(api, workspace):
    # Written by hand: Django's test client would strip the name down to "escape.txt".
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="../escape.txt"'
        "\r\nContent-Type: application/octet-stream\r\n\r\nx\r\n"
        f"--{BOUNDARY}--\r\n"
    )
    sneaky = api.post(
        f"{API}/files", data=body, content_type=f"multipart/form-data; boundary={BOUNDARY}"
    )
    assert sneaky.status_code == 400
    assert error_of(sneaky) == "bad_path"
    assert "'../escape.txt' contains '..'" in sneaky.json()["error"]["message"]
    outside = upload(api, SimpleUploadedFile("x.txt", b"x"), folder="../..")
    assert error_of(outside) == "bad_path"
    assert not (workspace.parent / "escape.txt").exists()
    assert list(workspace.iterdir()) == []


def test_another_persons_files_do_not_exist(api, bob, workspaces):
    theirs = context_for(bob).workspace
    (theirs / "diary.txt").write_text("mine")
    assert error_of(api.get(f"{API}/files/diary.txt")) == "not_found"
    assert error_of(api.delete(f"{API}/files/diary.txt")) == "not_found"
    assert api.get(f"{API}/files?path=missing").status_code == 404
    assert (theirs / "diary.txt").read_text() == "mine"


def test_a_file_over_the_upload_limit_is_too_large(api, workspace, settings):
    settings.LOOP_UPLOAD_MAX_BYTES = 10
    response = upload(api, SimpleUploadedFile("big.bin", b"x" * 11))
    assert response.status_code == 413
    assert error_of(response) == "too_large"
    assert "over the 10-byte limit per file" in response.json()["error"]["message"]
    assert list(workspace.iterdir()) == []


def test_more_files_than_allowed_are_refused_each_past_the_limit(api, workspace, settings):
    settings.LOOP_UPLOAD_MAX_FILES = 1
    response = upload(api, SimpleUploadedFile("a.txt", b"a"), SimpleUploadedFile("b.txt", b"b"))
    assert response.status_code == 201
    assert [stored["path"] for stored in response.json()["stored"]] == ["a.txt"]
    assert response.json()["refused"] == [
        {"code": "too_many_files", "message": "b.txt was not stored: at most 1 files per upload."}
    ]
    assert not (workspace / "b.txt").exists()


def test_an_upload_past_the_quota_is_refused(api, workspace, settings):
    settings.LOOP_WORKSPACE_MAX_BYTES = 20
    (workspace / "old.txt").write_bytes(b"x" * 15)
    response = upload(api, SimpleUploadedFile("new.txt", b"y" * 10))
    assert response.status_code == 507
    assert error_of(response) == "quota_exceeded"
    assert "past its quota" in response.json()["error"]["message"]
    assert not (workspace / "new.txt").exists()


def test_an_upload_that_is_not_multipart_is_refused(api, workspace):
    response = api.post(f"{API}/files", {"text": "x"}, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response) == "invalid_upload"
    empty = api.post(f"{API}/files", {"other": SimpleUploadedFile("a.txt", b"a")})
    assert error_of(empty) == "invalid_upload"
    assert list(workspace.iterdir()) == []


# Memories ----------------------------------------------------------------------------------------


def test_add_list_search_and_forget(api, alice):
    added = api.post(f"{API}/memories", {"text": TEAL}, content_type="application/json")
    assert added.status_code == 201
    body = added.json()
    assert body["outcome"] == "stored"
    assert body["message"] == "Remembered."
    memory_id = body["memory"]["id"]
    assert body["memory"]["text"] == TEAL
    assert body["memory"]["kind"] == "fact"
    assert body["memory"]["source_run"] is None
    again = api.post(f"{API}/memories", {"text": TEAL}, content_type="application/json")
    assert again.status_code == 200
    assert again.json()["outcome"] == "duplicate"
    assert again.json()["memory"]["id"] == memory_id
    api.post(f"{API}/memories", {"text": CAT}, content_type="application/json")

    listed = api.get(f"{API}/memories").json()
    assert [memory["text"] for memory in listed] == [CAT, TEAL]
    page = api.get(f"{API}/memories?limit=1&before={listed[0]['id']}").json()
    assert [memory["text"] for memory in page] == [TEAL]
    found = api.get(f"{API}/memories?query=which colour do I like").json()
    assert found[0]["text"] == TEAL
    assert api.get(f"{API}/memories?kind=outcome").json() == []

    forgotten = api.delete(f"{API}/memories/{memory_id}")
    assert forgotten.json() == {"forgotten": [memory_id]}
    assert not Memory.objects.filter(pk=memory_id).exists()
    record = ForgottenMemory.objects.get(memory_id=memory_id)
    assert record.forgotten_by == alice
    assert error_of(api.delete(f"{API}/memories/{memory_id}")) == "not_found"


def test_a_runs_outcome_is_listed_with_its_run(api, alice, workspaces):
    conversation = new_conversation(alice, "Arithmetic")
    run = execute_run(
        start_run(
            alice,
            "Compute the sum of 1..100 and save it to a file",
            model="mock",
            conversation=conversation,
        )
    )
    listed = api.get(f"{API}/memories?kind=outcome").json()
    assert [memory["source_run"] for memory in listed] == [run.pk]
    assert listed[0]["kind"] == "outcome"


def test_forgetting_takes_the_copies_stating_the_same_fact(api, alice):
    first = remember(alice, "My favourite city is Lisbon.").memory
    copy = remember(alice, "The user said: my favourite city is Lisbon, for sure.").memory
    other = remember(alice, "My favourite city is Porto.").memory
    kept = api.delete(f"{API}/memories/{first.pk}?copies=false")
    assert kept.json() == {"forgotten": [first.pk]}
    assert Memory.objects.filter(pk=copy.pk).exists()
    again = remember(alice, "My favourite city is Lisbon.").memory
    both = api.delete(f"{API}/memories/{again.pk}")
    assert both.json() == {"forgotten": [again.pk, copy.pk]}
    assert list(Memory.objects.filter(owner=alice)) == [other]


def test_another_persons_memory_does_not_exist(api, bob):
    theirs = remember(bob, CAT).memory
    assert error_of(api.delete(f"{API}/memories/{theirs.pk}")) == "not_found"
    assert Memory.objects.filter(pk=theirs.pk).exists()
    assert api.get(f"{API}/memories?query=cat").json() == []
    assert api.get(f"{API}/memories").json() == []


def test_an_invalid_memory_is_refused_with_the_pages_words(api, alice):
    response = api.post(f"{API}/memories", {"text": "  "}, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response) == "invalid_memory"
    assert response.json()["error"]["message"] == "Not remembered: A memory needs some text."
    assert not Memory.objects.filter(owner=alice).exists()


def test_changes_are_limited_per_minute(api, alice, settings):
    settings.LOOP_MEMORY_CHANGES_PER_MINUTE = 1
    first = api.post(f"{API}/memories", {"text": TEAL}, content_type="application/json")
    assert first.status_code == 201
    response = api.post(f"{API}/memories", {"text": CAT}, content_type="application/json")
    assert response.status_code == 429
    assert error_of(response) == "rate_limited"
    assert response.json()["error"]["message"] == (
        "Too many changes to your memories this minute: try again in a minute."
    )
    assert response["Retry-After"] == "30"
    assert [memory.text for memory in Memory.objects.filter(owner=alice)] == [TEAL]


def test_searches_are_limited_per_minute(api, alice, settings):
    settings.LOOP_MEMORY_SEARCHES_PER_MINUTE = 1
    remember(alice, TEAL)
    assert api.get(f"{API}/memories?query=colour").status_code == 200
    response = api.get(f"{API}/memories?query=colour")
    assert response.status_code == 429
    assert error_of(response) == "rate_limited"
    assert "Too many searches" in response.json()["error"]["message"]
    assert api.get(f"{API}/memories").status_code == 200  # a listing is no search


# Tools and models --------------------------------------------------------------------------------


def test_tools_are_loops_own_and_the_mcp_tools_offered_to_the_person(api, alice, bob, settings):
    settings.LOOP_APPROVAL = "run_code=ask"
    ApprovalPreference.objects.create(user=alice, ask_write_file=True)
    server = McpServer.objects.create(name="Calendar", prefix="cal", url="https://mcp.invalid/mcp")
    server.users.add(alice)
    McpTool.objects.create(
        server=server,
        name="add_event",
        exposed_name="cal__add_event",
        description="Add an event.",
        digest="0" * 64,
        pinned_at=timezone.now(),
    )
    theirs = McpServer.objects.create(name="Bobs", prefix="bobs", url="https://mcp.invalid/mcp")
    theirs.users.add(bob)
    McpTool.objects.create(
        server=theirs,
        name="peek",
        exposed_name="bobs__peek",
        digest="0" * 64,
        pinned_at=timezone.now(),
    )
    tools = {tool["name"]: tool for tool in api.get(f"{API}/tools").json()}
    assert "bobs__peek" not in tools
    assert tools["run_code"]["source"] == "builtin"
    assert tools["run_code"]["asks_approval"] is True
    assert tools["run_code"]["why"] == "The site asks before every run_code call."
    assert tools["write_file"]["asks_approval"] is True
    assert tools["write_file"]["why"] == "You asked to decide before write_file runs."
    assert tools["read_file"]["asks_approval"] is False
    assert tools["read_file"]["why"] == ""
    assert tools["remember"]["source"] == "builtin"
    mcp = tools["cal__add_event"]
    assert mcp["source"] == "Calendar"
    assert "Add an event." in mcp["description"]
    assert mcp["asks_approval"] is True  # an MCP tool asks by default


def test_models_are_those_offered_with_the_default(api, settings):
    settings.LOOP_MODEL = "mock"
    settings.LOOP_MODELS = []
    assert api.get(f"{API}/models").json() == [
        {"name": "mock", "provider": "mock", "model": "mock", "default": True}
    ]


# Input no operation takes ---------------------------------------------------------------------


def test_an_address_no_operation_has_is_a_json_404(api):
    for method in ("get", "post", "delete"):
        response = getattr(api, method)(f"{API}/nothing/here")
        assert response.status_code == 404
        assert error_of(response) == "not_found"
    newline = api.delete(f"{API}/files/a%0Ab")  # no route takes a newline in a path
    assert error_of(newline) == "not_found"


def test_a_nul_where_loop_would_store_or_look_it_up_is_refused(api):
    for url in (f"{API}/memories?query=a%00b", f"{API}/runs?status=a%00b"):
        response = api.get(url)
        assert response.status_code == 422, url
        assert error_of(response) == "invalid_request"
        assert "NUL" in response.json()["error"]["message"]
    assert error_of(api.get(f"{API}/files?path=a%00b")) == "bad_path"
