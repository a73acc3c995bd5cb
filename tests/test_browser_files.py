"""A person's files and memories in a real browser (Debian's Chromium through Playwright), against
a live daphne and a real worker: upload a file by the button, have the agent work on it, open it
from the tool card, download it, then forget what the run remembered and see the next run not
recall it. Screenshots of the Files panel and the Memories page land in var/test-artifacts/
(docs/images/files-laptop.png is a copy of one, made by hand like the chat's)."""

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from agent.models import AgentRun
from agent.selectors import events_of
from core.events import MemoriesRecalled
from memory.models import Memory
from tests.conftest import wait_for
from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
    logged_in,
    send,
)

pytestmark = pytest.mark.django_db(transaction=True)

DATA_CSV = b"name,count\nalpha,1\nbeta,2\ngamma,3 and more words\n"
QUESTION = "How many lines are in data.csv?"
ANSWER = "data.csv has 4 lines and 7 words."
SAVE_COUNT = "Save that to count.txt"


def upload_by_the_button(page: Page, path: Path) -> None:
    """Choose the file in the chooser the panel's button opens, as a person would (choosing is
    enough: the upload starts at once)."""
    with page.expect_file_chooser() as chooser:
        page.get_by_text("Choose files").click()
    chooser.value.set_files(path)


def recalled_texts(run: AgentRun) -> list[str]:
    """The memories a run recalled, from its log."""
    return [
        memory.text
        for _, event in events_of(run)
        if isinstance(event, MemoriesRecalled)
        for memory in event.memories
    ]


def run_of(task: str, number: int) -> AgentRun:
    """The `number`th run (from 1) of this task, oldest first."""
    return AgentRun.objects.filter(task=task).order_by("pk")[number - 1]


def unfold_the_sidebar(page: Page) -> None:
    """On a phone the sidebar is folded away: its button slides it in."""
    page.get_by_role("button", name="Menu").click()
    expect(page.locator(".places")).to_be_in_viewport(ratio=1)


def open_places_on_a_phone(page: Page, name: str) -> None:
    unfold_the_sidebar(page)
    page.locator(".places").get_by_role("link", name=name).click()


def test_a_person_uploads_works_on_downloads_and_forgets(live_site, browser, tmp_path):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)

    # Files, from the chat's sidebar: upload data.csv with the button.
    page.locator(".places").get_by_role("link", name="Files").click()
    page.wait_for_url(f"{live_site}/files/")
    upload = tmp_path / "data.csv"
    upload.write_bytes(DATA_CSV)
    upload_by_the_button(page, upload)
    expect(page.get_by_role("link", name="data.csv").first).to_be_visible(timeout=WAIT_MS)
    page.screenshot(path=ARTIFACTS / "files-laptop.png")

    phone = logged_in(browser, live_site, "alice", PHONE)
    open_places_on_a_phone(phone, "Files")
    phone.wait_for_url(f"{live_site}/files/")
    expect(phone.get_by_role("link", name="data.csv").first).to_be_visible()
    phone.screenshot(path=ARTIFACTS / "files-phone.png")

    # The agent sees the file at once, and works on it.
    page.goto(f"{live_site}/")
    send(page, QUESTION)
    turn = last_turn(page)
    expect(turn.locator(".card.answer")).to_contain_text(ANSWER, timeout=WAIT_MS)
    conversation = page.url

    # The read_file card opens the file; the file downloads byte for byte.
    turn.locator(".card.tool").get_by_role("link", name="Open data.csv").click()
    page.wait_for_url(f"{live_site}/files/view/data.csv")
    expect(page.locator(".preview tbody tr").last.locator("td")).to_have_text(
        ["gamma", "3 and more words"]
    )
    with page.expect_download() as download:
        page.get_by_role("link", name=re.compile(r"download", re.I)).first.click()
    assert download.value.suggested_filename == "data.csv"
    assert Path(download.value.path()).read_bytes() == DATA_CSV

    # Counting leaves no memory (a run that only read and counted is redone in a moment);
    # saving the count to a file does, and the same question asked again recalls it.
    first = db(lambda: run_of(QUESTION, 1))
    assert not db(lambda: Memory.objects.filter(source_run_id=first.pk).exists())
    page.goto(conversation)
    send(page, SAVE_COUNT)
    expect(last_turn(page).locator(".card.answer")).to_contain_text("count.txt", timeout=WAIT_MS)
    remembered = wait_for(
        lambda: db(lambda: Memory.objects.filter(owner=alice, text__contains=ANSWER).first()),
        "the run's memory to be stored",
    )
    send(page, QUESTION)
    turn = last_turn(page)
    expect(turn.locator(".card.answer")).to_contain_text(ANSWER, timeout=WAIT_MS)
    second = db(lambda: run_of(QUESTION, 2))
    assert remembered.text in db(lambda: recalled_texts(second))

    # Its memories card leads to those memories; forget the run's memory there.
    memories = turn.locator(".card.memories")
    expect(memories).to_contain_text("recalled")
    page.screenshot(path=ARTIFACTS / "chat-files-laptop.png")
    memories.get_by_role("link", name=re.compile("in Memories")).click()
    page.wait_for_url(f"{live_site}/memories/?run={second.pk}")
    entry = page.locator(f"#memory-{remembered.pk}")
    expect(entry).to_contain_text(ANSWER)
    page.screenshot(path=ARTIFACTS / "memories-laptop.png")
    phone.goto(conversation)
    unfold_the_sidebar(phone)
    phone.screenshot(path=ARTIFACTS / "chat-places-phone.png")
    phone.locator(".places").get_by_role("link", name="Memories").click()
    phone.wait_for_url(f"{live_site}/memories/")
    phone.get_by_text("From your runs").click()  # what runs left is folded under the facts
    expect(phone.locator(f"#memory-{remembered.pk}")).to_be_visible()
    phone.screenshot(path=ARTIFACTS / "memories-phone.png")
    entry.get_by_role("button", name="Forget", exact=True).click()
    expect(page.locator(f"#memory-{remembered.pk}")).to_have_count(0)
    assert not db(lambda: Memory.objects.filter(pk=remembered.pk).exists())

    # The next run does not recall it: it recalls nothing, so it has no memories card.
    page.get_by_role("link", name="Chat").click()
    page.locator(".conversations a").first.click()
    page.wait_for_url(conversation)
    send(page, QUESTION)
    turn = last_turn(page)
    expect(turn.locator(".card.answer")).to_contain_text(ANSWER, timeout=WAIT_MS)
    third = db(lambda: run_of(QUESTION, 3))
    assert db(lambda: recalled_texts(third)) == []
    expect(turn.locator(".card.memories")).to_have_count(0)
    for name in ("files-laptop", "files-phone", "memories-laptop", "memories-phone"):
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 0
