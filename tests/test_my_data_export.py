"""A person's export of their own data: one zip of their conversations (each run's transcript as
the console exports it), their runs outside conversations, their files and their memories, and
nothing of anyone else's."""

import io
import json
import os
import re
import zipfile

import pytest
from django.contrib.auth.models import Group, User
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse

from accounts import my_data
from agent.models import AgentRun, Conversation
from agent.runs import delete_conversation, new_conversation, start_run
from assistants.models import Assistant
from assistants.versions import new_version
from engine.execution import execute_run
from memory.models import Memory
from memory.store import remember
from sharing.links import share
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

DEMO = "Compute the sum of 1..100 and save it to a file"
BOBS_SECRET = "bob keeps the spare key under the blue flowerpot"
PAGE = "/accounts/data/"
EXPORT = "/accounts/data/export/"


def ask(user: User, task: str, conversation: Conversation | None = None) -> AgentRun:
    return execute_run(start_run(user, task, model="mock", conversation=conversation))


@pytest.fixture
def alices_data(alice, bob, workspaces) -> dict:
    """Alice's conversation (the demo: sum.txt and a memory), a run outside any conversation,
    a conversation she deleted, files of her own; and bob's secret, in his run, file and
    memory, with a link to it from alice's workspace."""
    conversation = new_conversation(alice)
    demo = ask(alice, DEMO, conversation)
    loose = ask(alice, "What is 17 * 23?")
    gone = new_conversation(alice)
    deleted_run = ask(alice, "What is 2 + 2?", gone)
    delete_conversation(alice, gone.pk)
    remember(alice, "Alice's favourite colour is teal.")
    start_run(bob, f"Keep in mind: {BOBS_SECRET}", model="mock", conversation=new_conversation(bob))
    remember(bob, BOBS_SECRET)
    bobs = workspaces / str(bob.pk)
    bobs.mkdir(exist_ok=True)
    (bobs / "secret.txt").write_text(BOBS_SECRET)
    alices = workspaces / str(alice.pk)
    (alices / "notes").mkdir()
    (alices / "notes" / "todo.md").write_text("- buy milk\n")
    (alices / "notes" / "data.bin").write_bytes(bytes(range(256)) * 4)
    (alices / "bobs-secret.txt").symlink_to(bobs / "secret.txt")
    (alices / "bobs-files").symlink_to(bobs, target_is_directory=True)
    os.mkfifo(alices / "pipe")
    return {"conversation": conversation, "demo": demo, "loose": loose, "gone": gone,
            "deleted_run": deleted_run}  # fmt: skip


def exported(client: Client) -> zipfile.ZipFile:
    response = client.post(EXPORT)
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def read_json(archive: zipfile.ZipFile, name: str):
    return json.loads(archive.read(name))


def console_transcript(run: AgentRun) -> dict:
    operator = User.objects.create_superuser("root", "root@example.com", PASSWORD)
    client = Client()
    client.force_login(operator)
    response = client.get(reverse("admin:agent_agentrun_transcript", args=[run.pk]))
    operator.delete()
    return json.loads(response.content)


def test_the_export_is_a_zip_attachment_streamed_as_it_is_made(as_alice, alices_data):
    response = as_alice.post(EXPORT)
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/zip"
    assert re.fullmatch(
        r'attachment; filename="loop-data-\d{4}-\d\d-\d\d\.zip"', response["Content-Disposition"]
    )
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.testzip() is None


def test_a_conversation_holds_every_run_s_transcript_as_the_console_exports_it(
    as_alice, alices_data
):
    conversation = Conversation.objects.get(pk=alices_data["conversation"].pk)
    archive = exported(as_alice)
    slug = f"conversations/{conversation.pk}-compute-the-sum-of-1100-and-save-it-to-a-file.json"
    exported_conversation = read_json(archive, slug)
    assert exported_conversation["title"] == conversation.title
    assert exported_conversation["deleted_at"] is None
    assert exported_conversation["runs"] == [console_transcript(alices_data["demo"])]
    assert exported_conversation["runs"][0]["format"] == "loop.transcript/1"


def test_runs_outside_conversations_and_deleted_conversations_are_in_it(as_alice, alices_data):
    archive = exported(as_alice)
    loose = alices_data["loose"]
    assert read_json(archive, f"runs/{loose.pk}.json") == console_transcript(loose)
    gone = alices_data["gone"]
    (name,) = [n for n in archive.namelist() if n.startswith(f"conversations/{gone.pk}-")]
    deleted = read_json(archive, name)
    assert deleted["deleted_at"] is not None
    assert deleted["runs"] == [console_transcript(alices_data["deleted_run"])]


def test_the_workspace_s_files_are_in_it_and_no_link_is_followed(as_alice, alices_data):
    archive = exported(as_alice)
    files = {n for n in archive.namelist() if n.startswith("files/")}
    assert files == {"files/sum.txt", "files/notes/todo.md", "files/notes/data.bin"}
    assert archive.read("files/sum.txt") == b"5050\n"
    assert archive.read("files/notes/data.bin") == bytes(range(256)) * 4
    readme = archive.read("README.txt").decode()
    for left_out in ("bobs-secret.txt", "bobs-files", "pipe"):
        assert f"  {left_out}\n" in readme


def test_a_file_larger_than_a_chunk_arrives_whole(as_alice, alice, workspaces, monkeypatch):
    monkeypatch.setattr(my_data, "CHUNK_BYTES", 1000)
    content = os.urandom(10_500)
    (workspaces / str(alice.pk)).mkdir()
    (workspaces / str(alice.pk) / "big.bin").write_bytes(content)
    assert exported(as_alice).read("files/big.bin") == content


def test_memories_are_in_it_with_what_is_known_of_each(as_alice, alice, alices_data):
    memories = read_json(exported(as_alice), "memories.json")
    stored = Memory.objects.filter(owner=alice).order_by("pk")
    assert [m["text"] for m in memories] == [m.text for m in stored]
    by_run = {m["source_run_id"]: m for m in memories}
    demo = by_run[alices_data["demo"].pk]
    assert demo["origin"] == "run"
    assert set(demo) >= {"stored_at", "recall_count", "last_recalled_at"}
    assert "Alice's favourite colour is teal." in [m["text"] for m in memories]


def test_the_readme_and_account_say_what_is_there(as_alice, alices_data):
    archive = exported(as_alice)
    readme = archive.read("README.txt").decode()
    for part in ("conversations/", "runs/", "memories.json", "files/", "loop.transcript/1"):
        assert part in readme
    assert read_json(archive, "account.json")["username"] == "alice"


def test_nothing_of_another_person_is_in_it(as_alice, bob, alices_data):
    archive = exported(as_alice)
    bobs_runs = set(AgentRun.objects.filter(user=bob).values_list("pk", flat=True))
    for name in archive.namelist():
        assert BOBS_SECRET.encode() not in archive.read(name), name
    run_ids = {
        run["run"]["id"]
        for name in archive.namelist()
        if name.startswith("conversations/")
        for run in read_json(archive, name)["runs"]
    }
    assert run_ids
    assert not run_ids & bobs_runs


def test_the_export_is_only_ever_the_logged_in_person_s(as_alice, bob, alices_data, settings):
    """No URL names a person: whatever is asked, the export is alice's."""
    settings.LOOP_EXPORT_INTERVAL_SECONDS = 0
    for asked in (f"{EXPORT}?user={bob.pk}", f"{EXPORT}?username=bob", f"{EXPORT}{bob.pk}/"):
        response = as_alice.post(asked, {"user": bob.pk, "username": "bob"})
        if response.status_code == 404:
            continue
        archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
        assert read_json(archive, "account.json")["username"] == "alice"
    as_bob = Client()
    as_bob.force_login(bob)
    assert read_json(exported(as_bob), "account.json")["username"] == "bob"


def test_the_page_and_the_export_need_a_login(alices_data):
    anonymous = Client()
    for url in (PAGE, EXPORT):
        response = anonymous.post(url) if url == EXPORT else anonymous.get(url)
        assert response.status_code == 302
        assert response.url.startswith("/accounts/login/")


def test_an_empty_account_exports_a_zip_with_its_readme(as_alice):
    archive = exported(as_alice)
    assert set(archive.namelist()) == {"account.json", "memories.json", "README.txt"}
    assert read_json(archive, "memories.json") == []


def test_the_page_offers_the_export_and_a_confirmed_delete_without_inline_code(
    as_alice, alices_data
):
    response = as_alice.get(PAGE)
    page = response.text
    assert response.status_code == 200
    assert f'action="{EXPORT}"' in page
    assert 'action="/accounts/data/delete/"' in page
    assert 'type="password" name="password"' in page
    assert "data-confirm=" in page
    assert 'name="understood" required' in page
    assert "csrfmiddlewaretoken" in page
    assert not re.search(r"<[^>]+\son[a-z]+=", page)
    assert not re.search(r"<script(?![^>]*\ssrc=\"/static/)", page)
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_account_holds_their_assistants_and_shared_links_never_a_link_itself(
    as_alice, alice, bob, alices_data
):
    team = Group.objects.create(name="Team")
    alice.groups.add(team)
    mine = Assistant.objects.create(owner=alice, name="Editor", instructions="Be brief.")
    mine.groups.add(team)
    new_version(mine)
    Assistant.objects.create(owner=bob, name="Bob's own")
    conversation = alices_data["demo"].conversation
    made = share(alice, conversation.pk, group_id=team.pk)
    account = read_json(exported(as_alice), "account.json")
    assert [a["name"] for a in account["assistants"]] == ["Editor"]
    [editor] = account["assistants"]
    assert (editor["instructions"], editor["versions"]) == ("Be brief.", 1)
    assert editor["shared_with_groups"] == ["Team"]
    [shared] = account["shared_links"]
    assert (shared["conversation_id"], shared["group"]) == (conversation.pk, "Team")
    assert made.token not in json.dumps(account)
    assert made.link.token_digest not in json.dumps(account)
