"""What runs cost: a known price table gives each turn's exact cost, summed on the run, its
conversation and its person; every turn charged once across a continue; a new price only for
later turns; the chat shows a run's cost only when the site says so."""

from datetime import timedelta
from decimal import Decimal

import lxml.html
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.ledger import spend_of_conversation, spend_of_person, spend_of_run
from accounting.models import Charge, Price
from accounting.reports import amount_text, cost_text
from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from core.events import EndCause, RunStatus
from core.llm import LLMError, Usage
from engine.execution import execute_run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

MILLION = Decimal(1_000_000)
INPUT, OUTPUT, CACHED = Decimal("0.59"), Decimal("0.79"), Decimal("0.10")


def priced(
    input: Decimal = INPUT,
    output: Decimal = OUTPUT,
    cached: Decimal | None = CACHED,
    since: timedelta = timedelta(days=1),
) -> Price:
    return Price.objects.create(
        model="mock",
        input=input,
        output=output,
        cached_input=cached,
        effective_from=timezone.now() - since,
    )


def turn_cost(prompt: int, completion: int, cached: int = 0, price: Price | None = None) -> Decimal:
    """What the price table says a turn costs, worked out here apart from accounting/prices.py."""
    i, o = (INPUT, OUTPUT) if price is None else (price.input, price.output)
    c = CACHED if price is None else price.cached_input or i
    return ((prompt - cached) * i + cached * c + completion * o) / MILLION


def three_turns() -> ScriptedLLM:
    return ScriptedLLM(
        [
            call("list_files", {}, usage=Usage(1000, 50, 400)),
            call("list_files", {}, usage=Usage(1500, 40, 1000)),
            answer("Your workspace is empty.", usage=Usage(1700, 30)),
        ]
    )


THREE_TURNS = turn_cost(1000, 50, 400) + turn_cost(1500, 40, 1000) + turn_cost(1700, 30)


def test_a_run_of_several_turns_costs_exactly_what_the_price_table_says(alice, bob):
    priced()
    conversation = new_conversation(alice)
    first = execute_run(start_run(alice, "List my files", model="mock", conversation=conversation))
    first_cost = spend_of_run(first.pk).cost_in("USD")
    second = start_run(alice, "List them again", model="mock", conversation=conversation)
    second = execute_run(second, llm=three_turns())
    other = execute_run(
        start_run(alice, "Again", model="mock", conversation=new_conversation(alice))
    )
    execute_run(start_run(bob, "Bob's", model="mock", conversation=new_conversation(bob)))

    run = spend_of_run(second.pk)
    assert (run.turns, run.unpriced_turns, run.cached_tokens) == (3, 0, 1400)
    assert run.costs == {"USD": THREE_TURNS}  # exact: Decimal, not a float near it
    assert [
        c.cost for c in Charge.objects.filter(run_id=second.pk, kind="turn").order_by("step")
    ] == [
        turn_cost(1000, 50, 400),
        turn_cost(1500, 40, 1000),
        turn_cost(1700, 30),
    ]
    assert spend_of_conversation(conversation.pk).costs == {"USD": first_cost + THREE_TURNS}
    other_cost = spend_of_run(other.pk).cost_in("USD")
    assert spend_of_person(alice.pk).costs == {"USD": first_cost + THREE_TURNS + other_cost}
    assert cost_text(run) == f"{amount_text(THREE_TURNS)} USD"


def test_a_model_with_no_price_costs_price_unknown_never_0(alice):
    run = execute_run(start_run(alice, "What is 17 * 23?", model="mock"))
    spend = spend_of_run(run.pk)
    assert spend.turns == spend.unpriced_turns > 0
    assert spend.costs == {}
    assert cost_text(spend) == "price unknown"


def test_across_a_continue_every_turn_is_charged_once(alice):
    priced()
    run = start_run(alice, "List my files", model="mock", conversation=new_conversation(alice))
    down = ScriptedLLM(
        [call("list_files", {}, usage=Usage(1000, 50)), LLMError("Groq answered 503")]
    )
    run = execute_run(run, llm=down)
    assert (run.status, run.cause) == (RunStatus.FAILED, EndCause.MODEL_DOWN)
    assert spend_of_run(run.pk).costs == {"USD": turn_cost(1000, 50)}

    client = Client()
    client.force_login(alice)
    client.post(reverse("chat:continue", args=[run.pk]), headers={"HX-Request": "true"})
    back = ScriptedLLM(
        [call("list_files", {}, usage=Usage(1200, 20)), answer("Empty.", usage=Usage(1300, 10))]
    )
    run = execute_run(AgentRun.objects.get(pk=run.pk), llm=back)
    assert run.status == RunStatus.SUCCEEDED
    charges = Charge.objects.filter(run_id=run.pk, kind="turn")
    replies = run.events.filter(kind="model_replied")
    steps = sorted(charges.values_list("step", flat=True))
    assert steps == sorted(replies.values_list("data__step", flat=True))  # each turn, once
    assert len(steps) == len(set(steps)) == 3
    expected = turn_cost(1000, 50) + turn_cost(1200, 20) + turn_cost(1300, 10)
    assert spend_of_run(run.pk).costs == {"USD": expected}


def test_a_new_price_takes_effect_only_for_later_turns(alice):
    old = priced()
    before = execute_run(start_run(alice, "List my files", model="mock"), llm=three_turns())
    charged_before = list(
        Charge.objects.filter(run_id=before.pk, kind="turn").values_list("cost", flat=True)
    )
    new = priced(Decimal("3"), Decimal("15"), None, since=timedelta(0))
    after = execute_run(start_run(alice, "List my files", model="mock"), llm=three_turns())

    assert list(
        Charge.objects.filter(run_id=before.pk, kind="turn").values_list("cost", flat=True)
    ) == (charged_before)
    assert spend_of_run(before.pk).costs == {"USD": THREE_TURNS}
    later = turn_cost(1000, 50, 400, new) + turn_cost(1500, 40, 1000, new)
    later += turn_cost(1700, 30, 0, new)
    assert spend_of_run(after.pk).costs == {"USD": later}
    assert set(
        Charge.objects.filter(run_id=before.pk, kind="turn").values_list("price_id", flat=True)
    ) == {old.pk}
    assert set(
        Charge.objects.filter(run_id=after.pk, kind="turn").values_list("price_id", flat=True)
    ) == {new.pk}


# The chat


def conversation_page(alice, run: AgentRun) -> str:
    client = Client()
    client.force_login(alice)
    return client.get(reverse("chat:conversation", args=[run.conversation_id])).text


def test_the_chat_shows_a_runs_cost_beside_its_tokens_when_the_site_says_so(alice, settings):
    priced()
    run = start_run(alice, "List my files", model="mock", conversation=new_conversation(alice))
    run = execute_run(run, llm=three_turns())
    settings.LOOP_SHOW_COST = True
    page = conversation_page(alice, run)
    tokens = 1000 + 50 + 1500 + 40 + 1700 + 30
    assert f'<p class="run-cost muted">{tokens} tokens · {amount_text(THREE_TURNS)} USD</p>' in page

    [total] = lxml.html.fromstring(page).xpath("//header//span[@id='conversation-cost']")
    assert total.text_content() == f"{amount_text(THREE_TURNS)} USD"  # the conversation's

    settings.LOOP_SHOW_COST = False
    page = conversation_page(alice, run)
    assert "run-cost" not in page
    assert "conversation-cost" not in page
    assert "USD" not in page


def test_the_chat_says_price_unknown_for_a_model_with_no_price(alice, settings):
    settings.LOOP_SHOW_COST = True
    run = start_run(alice, "What is 17 * 23?", model="mock", conversation=new_conversation(alice))
    page = conversation_page(alice, execute_run(run))
    assert "tokens · price unknown</p>" in page
