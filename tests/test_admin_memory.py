"""The console's memory pages: what a memory holds, why it comes back, and forgetting it."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from agent.runs import start_run
from engine.execution import execute_run
from memory.models import ForgottenMemory, Memory, Origin

# The remember tool runs in a thread of its own, so it must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

MEMORIES = reverse("admin:memory_memory_changelist")
FORGOTTEN = reverse("admin:memory_forgottenmemory_changelist")


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def memory_page(memory: Memory) -> str:
    return reverse("admin:memory_memory_change", args=[memory.pk])


DEMO = "Compute the sum of 1..100 and save it to a file"


def run(user, task):
    return execute_run(start_run(user, task, model="mock"))


@pytest.fixture
def memories(alice, bob, workspaces):
    """Memories left by real runs: outcomes, a fact told on purpose, and a recall of one."""
    product = run(alice, DEMO)  # it writes a file: its outcome is kept
    run(alice, "Remember that my staging server is staging.example.com")
    recall = run(alice, "What was the sum of 1..100 that I computed before?")
    theirs = run(bob, DEMO)
    return {
        "product": Memory.objects.get(source_run_id=product.pk),
        "told": Memory.objects.get(owner=alice, origin=Origin.TOLD),
        "theirs": Memory.objects.get(source_run_id=theirs.pk),
        "recall_run": recall,
        "product_run": product,
    }


def test_the_memory_list_filters_by_owner_origin_and_date_and_searches_text(
    client, operator, memories, alice, bob
):
    everything = set(Memory.objects.values_list("pk", flat=True))
    assert listed(client.get(MEMORIES)) == everything
    assert listed(client.get(f"{MEMORIES}?origin__exact=told")) == {memories["told"].pk}
    assert listed(client.get(f"{MEMORIES}?user={bob.pk}")) == {memories["theirs"].pk}
    assert memories["product"].pk in listed(client.get(f"{MEMORIES}?user={alice.pk}"))
    assert listed(client.get(f"{MEMORIES}?q=staging.example.com")) >= {memories["told"].pk}
    assert memories["product"].pk not in listed(client.get(f"{MEMORIES}?q=staging.example.com"))
    today = timezone.now()
    on_day = (
        f"created_at__year={today.year}&created_at__month={today.month}&created_at__day={today.day}"
    )
    assert listed(client.get(f"{MEMORIES}?{on_day}")) == everything


def test_a_memorys_page_shows_its_text_recalls_source_neighbours_and_the_runs_that_recalled_it(
    client, operator, memories
):
    memory = memories["product"]
    memory.refresh_from_db()
    assert memory.recall_count == 1
    page = client.get(memory_page(memory)).content.decode()
    assert DEMO in page
    assert memory.last_recalled_at is not None
    recall = memories["recall_run"]
    recalls = page[page.index("Recalled by") :]
    assert reverse("admin:agent_agentrun_change", args=[recall.pk]) in recalls
    assert "similarity" in recalls
    source = reverse("admin:agent_agentrun_change", args=[memories["product_run"].pk])
    assert source in page
    # The neighbours are the owner's other memories only, with their cosine similarity.
    neighbours = page[page.index("Nearest neighbours") : page.index("Recalled by")]
    assert memory_page(memories["told"]) in neighbours
    assert memory_page(memories["theirs"]) not in neighbours
    assert memory_page(memory) not in neighbours
    assert "cosine similarity" in neighbours


def test_a_memory_nobody_recalled_says_so(client, operator, memories):
    page = client.get(memory_page(memories["theirs"])).content.decode()
    assert "No run has recalled it." in page


def test_forgetting_memories_removes_them_and_records_who_when_and_which(
    client, operator, memories, settings
):
    settings.LOOP_FORGOTTEN_TEXT_DAYS = 30  # the record keeps the text for a while
    doomed = [memories["product"], memories["theirs"]]
    confirm = client.post(
        MEMORIES, {"action": "delete_selected", "_selected_action": [m.pk for m in doomed]}
    )
    assert "the forgetting is recorded" in confirm.content.decode() or "records each one" in (
        confirm.content.decode()
    )
    client.post(
        MEMORIES,
        {"action": "delete_selected", "_selected_action": [m.pk for m in doomed], "post": "yes"},
    )
    assert not Memory.objects.filter(pk__in=[m.pk for m in doomed]).exists()
    records = {record.memory_id: record for record in ForgottenMemory.objects.all()}
    assert set(records) == {m.pk for m in doomed}
    for memory in doomed:
        record = records[memory.pk]
        assert (record.forgotten_by, record.forgotten_by_name) == (operator, "root")
        assert (record.owner, record.owner_name) == (memory.owner, memory.owner.username)
        assert record.text == memory.text
        assert record.source_run_id == memory.source_run_id
        assert record.forgotten_at is not None
    page = client.get(FORGOTTEN)
    assert listed(page) == {record.pk for record in records.values()}


def test_forgetting_one_memory_from_its_page_is_recorded_too(client, operator, memories):
    memory = memories["told"]
    delete = reverse("admin:memory_memory_delete", args=[memory.pk])
    assert "forgetting is recorded" in client.get(delete).content.decode()
    client.post(delete, {"post": "yes"})
    assert not Memory.objects.filter(pk=memory.pk).exists()
    record = ForgottenMemory.objects.get(memory_id=memory.pk)
    assert record.forgotten_by == operator
    assert record.text == ""  # LOOP_FORGOTTEN_TEXT_DAYS = 0: only the fact is kept


def test_a_forgotten_memory_still_shows_in_the_timelines_that_recalled_it(
    client, operator, memories
):
    memory = memories["product"]
    client.post(reverse("admin:memory_memory_delete", args=[memory.pk]), {"post": "yes"})
    page = client.get(
        reverse("admin:agent_agentrun_change", args=[memories["recall_run"].pk])
    ).content.decode()
    assert f"memory {memory.pk} (no longer stored)" in page


def test_staff_without_the_permission_cannot_forget(client, memories):
    staff = User.objects.create_user("viewer", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_memory"))
    client.force_login(staff)
    memory = memories["product"]
    response = client.post(
        MEMORIES, {"action": "delete_selected", "_selected_action": [memory.pk], "post": "yes"}
    )
    assert response.status_code in (200, 302)
    delete = client.post(reverse("admin:memory_memory_delete", args=[memory.pk]), {"post": "yes"})
    assert delete.status_code == 403
    assert Memory.objects.filter(pk=memory.pk).exists()
    assert not ForgottenMemory.objects.exists()
