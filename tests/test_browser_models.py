"""Picking a model in a real browser (Debian's Chromium through Playwright), against a live
daphne and a real worker, with two models offered: Loop's mock and a model on an
OpenAI-compatible server (the fake of tests/openai_server.py, reached by the worker over a
socket). The header, the run's record and the server's requests all say which model worked."""

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from agent.models import AgentRun, Conversation
from tests.openai_server import MODEL, openai_server_fixture, tool_call  # noqa: F401 (fixture)
from tests.test_browser import (  # noqa: F401 (the browser fixture)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    last_turn,
    logged_in,
    send,
    site,
)

pytestmark = pytest.mark.django_db(transaction=True)

LLAMA = f"openai:{MODEL}"
SUGGESTION = "What is 17 * 23?"


@pytest.fixture
def two_model_site(worker_env, start_worker, openai_server) -> Iterator[str]:
    """The site offering the mock (the default) and the fake server's model; nothing else the
    environment configures reaches it."""
    offered = {
        "LOOP_MODELS": f"mock,{LLAMA}",
        "LOOP_OPENAI_BASE_URL": openai_server.base_url,
        "LOOP_OPENAI_MODEL": "",
        "LOOP_MODEL": "",
        "GROQ_API_KEY": "",
    }
    with site(worker_env, start_worker, **offered) as url:
        yield url


def chat_models(server) -> list[str]:
    """The model each chat request to the server named."""
    return [r.body["model"] for r in server.requests if r.path.endswith("/chat/completions")]


def runs_used() -> list[tuple[str, str]]:
    return list(AgentRun.objects.order_by("pk").values_list("provider", "model"))


def answer_of(page: Page):
    return last_turn(page).locator(".card.answer")


def test_a_person_picks_a_model_and_its_runs_use_it(two_model_site, openai_server, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, two_model_site, "alice", LAPTOP)
    pick = page.locator("#model-pick")
    expect(pick).to_have_value("mock")  # the default
    expect(pick.locator("option")).to_have_text(
        ["mock · built in", f"{MODEL} · OpenAI-compatible server"]
    )

    # A new conversation on the server's model: a tool step, then its answer.
    openai_server.reply(tool_calls=[tool_call("write_file", {"path": "p.txt", "content": "391"})])
    openai_server.reply("I saved 391 to p.txt.")
    pick.select_option(LLAMA)
    page.fill("textarea[name=task]", "Save 17 * 23 to p.txt")
    page.press("textarea[name=task]", "Enter")
    page.wait_for_url(re.compile(r"/c/\d+/$"))
    expect(answer_of(page)).to_contain_text("I saved 391 to p.txt.", timeout=WAIT_MS)
    expect(last_turn(page).locator(".card.tool .tool-name")).to_have_text(["write_file"])
    expect(page.locator("#model-pick")).to_have_value(LLAMA)  # the conversation's model
    run = db(lambda: AgentRun.objects.get())
    assert (run.status, run.provider, run.model) == ("succeeded", "openai", MODEL)
    assert db(lambda: Conversation.objects.get().model) == LLAMA
    assert chat_models(openai_server) == [MODEL, MODEL]
    page.screenshot(path=ARTIFACTS / "chat-models.png")

    # The next message on the mock instead; the one after stays on it, unpicked.
    page.locator("#model-pick").select_option("mock")
    send(page, "What is 18 * 23?")
    expect(answer_of(page)).to_contain_text("18 * 23 = 414", timeout=WAIT_MS)
    expect(page.locator("#model-pick")).to_have_value("mock")
    send(page, "What is 19 * 23?")
    expect(answer_of(page)).to_contain_text("19 * 23 = 437", timeout=WAIT_MS)
    assert db(runs_used) == [("openai", MODEL), ("mock", "mock"), ("mock", "mock")]
    assert db(lambda: Conversation.objects.get().model) == "mock"
    assert chat_models(openai_server) == [MODEL, MODEL]  # the mock's runs asked it nothing

    # A suggestion starts a new conversation on the model picked, too.
    page.goto(f"{two_model_site}/")
    expect(page.locator("#model-pick")).to_have_value("mock")
    openai_server.reply("391, said the server's model.")
    page.locator("#model-pick").select_option(LLAMA)
    page.click(f"button[name=task][value='{SUGGESTION}']")
    page.wait_for_url(re.compile(r"/c/\d+/$"))
    expect(answer_of(page)).to_contain_text("391, said the server's model.", timeout=WAIT_MS)
    assert db(runs_used)[-1] == ("openai", MODEL)
    assert chat_models(openai_server) == [MODEL, MODEL, MODEL]
    assert openai_server.pending == 0
