"""A streamed answer in Chromium, through daphne and a real worker, from a model that drips its
reply (the fake OpenAI-compatible server of tests/openai_server.py, a few characters at a time):
every state the streamed card passes through shows no Markdown marker as text and is drawn as
its answer will be (a list, bold), the answer takes its place with the same structure, and
copying the answer copies its Markdown."""

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.openai_server import MODEL, openai_server_fixture  # noqa: F401 (the fixture)
from tests.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    last_turn,
    send,
    site,
)
from tests.test_browser_access import axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = """# Plan

Here is **the plan**, in *three* steps:

1. Read `sum.txt` with read_file
2. Add **one** to the number in it
3. Save it to [the file](https://example.com/sum)

| step | tool |
|---|---|
| read | read_file |

Done: 17 * 23 = 391.
"""
DRIP_SECONDS = 0.15  # between the server's chunks of 5 characters: dozens, over seconds
START_SECONDS = 3.0
# Every state of the streamed card's text, and the answer's as it first showed: recorded by the
# page itself at each change of the DOM, so no state between two samples is missed.
RECORD_STREAM = """
window.streamed = [];
window.answered = null;
new MutationObserver(() => {
  const prose = document.querySelector(".card.streaming .prose");
  const last = window.streamed[window.streamed.length - 1];
  if (prose && (!last || last.html !== prose.innerHTML)) {
    window.streamed.push({html: prose.innerHTML, text: prose.innerText});
  }
  const answer = document.querySelector(".card.answer .prose");
  if (answer && window.answered === null && window.streamed.length) {
    window.answered = answer.innerHTML;
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""
# What shows as text only when Markdown failed to become structure.
MARKERS = re.compile(r"\*\*|`|\[|\]\(|^\s*(?:#|\d+[.)]|[-+|>=])", re.MULTILINE)
STRUCTURE = re.compile(r"<(h\d|p|ol|ul|li|strong|em|code|a|table|thead|tbody|tr|th|td)\b")


@pytest.fixture
def dripping_site(worker_env, start_worker, openai_server) -> Iterator[str]:
    """The site whose one model is the fake server's, which answers by dripping ANSWER."""
    offered = {
        "LOOP_MODELS": f"openai:{MODEL}",
        "LOOP_OPENAI_BASE_URL": openai_server.base_url,
        "LOOP_OPENAI_MODEL": "",
        "LOOP_MODEL": "",
        "GROQ_API_KEY": "",
    }
    with site(worker_env, start_worker, **offered) as url:
        yield url


def person(browser, site_url: str) -> Page:  # noqa: F811
    """Alice, logged in, recording the stream, allowed the clipboard."""
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = log_in(browser, site_url, "alice", LAPTOP)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.add_init_script(RECORD_STREAM)
    page.reload()
    return page


def test_a_streamed_answer_shows_as_its_answer_does_and_copies_as_markdown(
    dripping_site,
    openai_server,
    browser,  # noqa: F811
):
    # The reply starts once the page watches the run (a page that missed a reply's start draws
    # none of it); the delay is that margin, not a measure.
    openai_server.reply(ANSWER, drip=DRIP_SECONDS, delay=START_SECONDS)
    page = person(browser, dripping_site)
    send(page, "Make a plan for sum.txt")
    expect(last_turn(page).locator(".card.streaming")).to_be_visible(timeout=WAIT_MS)
    last_turn(page).screenshot(path=ARTIFACTS / "chat-streaming.png")
    assert axe_violations(page) == []  # as it streams
    answer = last_turn(page).locator(".card.answer")
    expect(answer).to_contain_text("Done: 17 * 23 = 391.", timeout=WAIT_MS)
    expect(last_turn(page).locator(".card.streaming")).to_have_count(0)

    streamed = page.evaluate("window.streamed")
    assert len(streamed) > 10  # the reply came in many pieces, each drawn
    shown_raw = [state["text"] for state in streamed if MARKERS.search(state["text"])]
    assert shown_raw == []
    drawn = [STRUCTURE.findall(state["html"]) for state in streamed]
    assert any("ol" in tags and "strong" in tags for tags in drawn[:-1])  # before its end
    assert any("table" in tags for tags in drawn)
    # The answer takes the streamed card's place with what it had drawn: nothing changes shape.
    assert STRUCTURE.findall(page.evaluate("window.answered")) == drawn[-1]

    answer.get_by_role("button", name="Copy answer").click()
    expect(answer.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == ANSWER.rstrip("\n")
    assert axe_violations(page) == []
