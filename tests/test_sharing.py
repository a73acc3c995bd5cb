"""A conversation shared by link, through the site's own views on the real database, with runs
worked for real by the mock model: the copy is made at share time and shows nothing added
later, nothing of the sharer's memories or other conversations, no composer or action; its
audience is asked at every look (a non-member and a forged token alike get 404), a revoked link
410 at once; files go only when ticked, served from the copy as attachments, each fetch audited;
CSRF holds on making and revoking; a person sees and revokes their own links only; the console
lists and revokes every link."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agent import runs
from agent.models import AgentRun, Conversation, RunEvent
from agent.retention import prune
from agent.runs import delete_conversation, new_conversation, rename_conversation, start_run
from core.events import RunStatus
from core.loop import Limits
from engine.execution import execute_run
from memory.store import remember
from sharing import links
from sharing.models import LinkView, SharedFile, SharedLink
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

DEMO = "Compute the sum of 1..100 and save it to a file"
SECRET_MEMORY = "Alice's locker code is 4711."
OTHER_TITLE = "Weekend plans for the lake house"
RECALLING = "Remind me of my locker code"  # the mock cannot: its run recalls the memory, no more


def ask(user: User, task: str, conversation: Conversation) -> AgentRun:
    return execute_run(start_run(user, task, model="mock", conversation=conversation))


def client_of(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def shared(alice) -> Conversation:
    """Alice's conversation (the demo: a run_code, a read_file, a write_file of sum.txt; then a
    turn that recalled a memory of hers), beside another conversation of hers."""
    remember(alice, SECRET_MEMORY)
    conversation = new_conversation(alice)
    ask(alice, DEMO, conversation)
    ask(alice, RECALLING, conversation)
    rename_conversation(alice, conversation.pk, "Sum and save")
    other = new_conversation(alice)
    ask(alice, "What is 17 * 23?", other)
    rename_conversation(alice, other.pk, OTHER_TITLE)
    return conversation


def share_link(client: Client, conversation: Conversation, **fields: str) -> str:
    """The link's path, as the Share dialog's answer shows it."""
    response = client.post(
        reverse("sharing:share", args=[conversation.pk]),
        {"audience": "site", **fields},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    found = re.search(r'value="https?://[^/"]+(/shared/[^"]+/)"', response.content.decode())
    assert found, response.content.decode()
    return found.group(1)


def test_another_person_sees_the_turns_as_they_stood_and_nothing_else(alice, bob, shared):
    path = share_link(client_of(alice), shared)
    token = path.split("/")[2]
    link = SharedLink.objects.get()
    assert token not in str(SharedLink.objects.values().get())  # only its digest is kept
    assert link.token_digest == links.digest_of(token)

    later = ask(alice, "What is 123 * 457?", shared)  # after sharing
    assert "56211" in later.answer
    rename_conversation(alice, shared.pk, "Renamed since")

    page = client_of(bob).get(path)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Sum and save" in html
    assert "Renamed since" not in html
    assert DEMO in html
    assert "5050" in html
    assert html.count('class="card tool') == 3  # run_code, read_file, write_file
    assert "56211" not in html
    assert "123 * 457" not in html
    assert RECALLING in html
    own = client_of(alice).get(reverse("chat:conversation", args=[shared.pk])).content.decode()
    assert "4711" in own
    assert OTHER_TITLE in own
    assert "4711" not in html
    assert 'class="card memories' not in html
    assert "/memories/?run=" not in html
    assert OTHER_TITLE not in html
    for absent in ('id="task-form"', "<textarea", 'name="task"', "/send/", "Regenerate", "Delete"):
        assert absent not in html, absent
    assert "/files/view/" not in html  # no link into anyone's Files panel
    assert 'Shared by <strong class="sharer">alice</strong>' in html
    assert list(LinkView.objects.values_list("viewer__username", "file")) == [("bob", "")]


def test_a_revoked_link_is_refused_at_once(alice, bob, shared):
    path = share_link(client_of(alice), shared)
    assert client_of(bob).get(path).status_code == 200
    revoked = client_of(alice).post(
        reverse("shared_link_revoke"), {"link": SharedLink.objects.get().pk}
    )
    assert revoked.status_code == 302
    page = client_of(bob).get(path)
    assert page.status_code == 410
    assert "This link was revoked" in page.content.decode()
    assert "5050" not in page.content.decode()
    assert LinkView.objects.count() == 1  # the refused look shows nothing, and is no view


def test_deleting_the_conversation_revokes_its_links(alice, bob, shared):
    path = share_link(client_of(alice), shared)
    delete_conversation(alice, shared.pk)
    assert client_of(bob).get(path).status_code == 410
    assert SharedLink.objects.get().revoked_at is not None


def test_a_group_link_admits_its_members_only(alice, bob, shared):
    team = Group.objects.create(name="team")
    alice.groups.add(team)
    path = share_link(client_of(alice), shared, audience=f"group:{team.pk}")
    carol = User.objects.create_user("carol", password=PASSWORD)
    refused = client_of(bob).get(path)
    assert refused.status_code == 404
    assert "team" not in refused.content.decode()
    assert "alice" not in refused.content.decode()
    carol.groups.add(team)
    assert client_of(carol).get(path).status_code == 200


def test_a_group_not_ones_own_is_refused(alice, shared):
    theirs = Group.objects.create(name="theirs")
    response = client_of(alice).post(
        reverse("sharing:share", args=[shared.pk]),
        {"audience": f"group:{theirs.pk}"},
        headers={"HX-Request": "true"},
    )
    assert "Pick who may open the link" in response.content.decode()
    assert not SharedLink.objects.exists()


def test_a_forged_token_is_not_found(alice, bob, shared):
    share_link(client_of(alice), shared)
    assert client_of(bob).get("/shared/" + "A" * 43 + "/").status_code == 404
    assert client_of(bob).get("/shared/" + "A" * 43 + "/files/sum.txt").status_code == 404


def test_files_go_only_when_ticked_and_each_fetch_is_audited(alice, bob, shared, workspaces):
    without = share_link(client_of(alice), shared)
    assert f"{without}files/" not in client_of(bob).get(without).content.decode()
    assert client_of(bob).get(f"{without}files/sum.txt").status_code == 404
    assert not SharedFile.objects.exists()

    with_files = share_link(client_of(alice), shared, include_files="1")
    (workspaces / str(alice.pk) / "sum.txt").write_text("changed after sharing\n")
    page = client_of(bob).get(with_files).content.decode()
    assert f'href="{with_files}files/sum.txt"' in page
    download = client_of(bob).get(f"{with_files}files/sum.txt")
    assert download.status_code == 200
    assert download.content == b"5050\n"  # the copy, not the workspace as it is now
    assert download["Content-Disposition"].startswith("attachment")
    assert download["X-Content-Type-Options"] == "nosniff"
    assert "Content-Security-Policy" in download
    fetched = LinkView.objects.filter(file="sum.txt").get()
    assert fetched.viewer == bob


def test_files_over_the_bound_are_refused_with_a_reason(alice, shared, settings):
    settings.LOOP_SHARE_FILES_MAX_BYTES = 3
    response = client_of(alice).post(
        reverse("sharing:share", args=[shared.pk]),
        {"audience": "site", "include_files": "1"},
        headers={"HX-Request": "true"},
    )
    assert "LOOP_SHARE_FILES_MAX_BYTES" in response.content.decode()
    assert not SharedLink.objects.exists()


def test_making_and_revoking_need_the_csrf_token(alice, shared):
    client = client_of(alice, csrf=True)
    made = client.post(reverse("sharing:share", args=[shared.pk]), {"audience": "site"})
    assert made.status_code == 403
    assert not SharedLink.objects.exists()
    links.share(alice, shared.pk)
    revoked = client.post(reverse("shared_link_revoke"), {"link": SharedLink.objects.get().pk})
    assert revoked.status_code == 403
    assert SharedLink.objects.get().revoked_at is None


def test_another_person_can_neither_share_list_nor_revoke_ones_links(alice, bob, shared):
    links.share(alice, shared.pk)
    link = SharedLink.objects.get()
    bobs = client_of(bob)
    assert (
        bobs.post(reverse("sharing:share", args=[shared.pk]), {"audience": "site"}).status_code
        == 404
    )
    assert "Sum and save" not in bobs.get(reverse("shared_links")).content.decode()
    assert bobs.post(reverse("shared_link_revoke"), {"link": link.pk}).status_code == 404
    link.refresh_from_db()
    assert link.revoked_at is None
    assert "Sum and save" in client_of(alice).get(reverse("shared_links")).content.decode()


def test_the_console_lists_and_revokes_every_link(alice, bob, shared, operator, client):
    path = share_link(client_of(alice), shared)
    client_of(bob).get(path)
    link = SharedLink.objects.get()
    listed = client.get(reverse("admin:sharing_sharedlink_changelist"))
    assert listed.status_code == 200
    assert "Sum and save" in listed.content.decode()
    assert "alice" in listed.content.decode()
    live = client.get(reverse("admin:sharing_sharedlink_changelist") + "?state=live")
    assert "Sum and save" in live.content.decode()
    audit = client.get(reverse("admin:sharing_linkview_changelist") + f"?link__id__exact={link.pk}")
    assert audit.status_code == 200
    assert "bob" in audit.content.decode()
    assert (
        client.post(reverse("admin:sharing_sharedlink_revoke", args=[link.pk])).status_code == 302
    )
    link.refresh_from_db()
    assert link.revoked_by == operator
    assert client_of(bob).get(path).status_code == 410
    revoked = client.get(reverse("admin:sharing_sharedlink_changelist") + "?state=revoked")
    assert "Sum and save" in revoked.content.decode()


def test_the_copy_outlives_the_log_and_says_who_continued_as_others_read_it(alice, bob, settings):
    """A run continued by its owner reads "you" in the owner's chat, "the owner" shared; and
    the log pruned after sharing (its events gone) changes nothing the link shows."""
    conversation = new_conversation(alice)
    run = start_run(alice, DEMO, model="mock", conversation=conversation, limits=Limits(2))
    assert execute_run(run).status == RunStatus.HALTED
    run = execute_run(runs.continue_run(alice, run.pk))
    assert run.status == RunStatus.SUCCEEDED
    own = client_of(alice).get(reverse("chat:conversation", args=[conversation.pk])).text
    assert "Continued: you asked it to go on" in own
    path = share_link(client_of(alice), conversation)

    settings.LOOP_KEEP_EVENTS_DAYS = 1
    prune(now=timezone.now() + timedelta(days=2))  # the retention's pass, two days on
    assert not RunEvent.objects.filter(run=run).exists()

    html = client_of(bob).get(path).text
    assert "Continued: the owner asked it to go on" in html
    assert "you asked" not in html
    assert "5050" in html
    assert html.count('class="card tool') == 3
    assert "Log pruned" not in html
