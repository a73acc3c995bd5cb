"""The ledger: each recorded model turn is one charge, priced from the table in force when it was
recorded, exactly; a model with no price is "price unknown", never 0; an account's charges
outlive it under an anonymous id."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounting.ledger import spend_of_conversation, spend_of_person, spend_of_run
from accounting.models import Charge, ChargeKind, Price
from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import Conversation
from agent.runs import start_run
from core.llm import Usage
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

PRICES = '{"mock": {"input": 0.15, "output": 0.6, "cached_input": 0.075, "currency": "USD"}}'
TURNS = [
    call("list_files", {}, usage=Usage(1000, 20)),
    call("list_files", {"path": "."}, usage=Usage(1200, 30, 800)),
    answer("done", usage=Usage(1500, 50, 1000)),
]


def cost(prompt: int, completion: int, cached: int = 0) -> Decimal:
    """The price table above, by hand."""
    return (
        Decimal(prompt - cached) * Decimal("0.15")
        + Decimal(cached) * Decimal("0.075")
        + Decimal(completion) * Decimal("0.6")
    ) / Decimal(1_000_000)


def worked(user, replies, conversation=None):
    run = start_run(user, "a task", model="mock", conversation=conversation)
    return execute_run(run, llm=ScriptedLLM(replies))


def test_each_turn_is_charged_once_exactly_and_summed(alice, settings, workspaces):
    settings.LOOP_PRICES = PRICES
    conversation = Conversation.objects.create(owner=alice)
    run = worked(alice, TURNS, conversation)

    charges = list(Charge.objects.filter(run_id=run.pk, kind="turn").order_by("step"))
    assert [(c.step, c.kind, c.model) for c in charges] == [
        (1, ChargeKind.TURN, "mock"),
        (2, ChargeKind.TURN, "mock"),
        (3, ChargeKind.TURN, "mock"),
    ]
    expected = [cost(1000, 20), cost(1200, 30, 800), cost(1500, 50, 1000)]
    assert [c.cost for c in charges] == expected
    assert [c.cached_tokens for c in charges] == [0, 800, 1000]
    assert {c.currency for c in charges} == {"USD"}
    total = sum(expected, Decimal(0))
    assert spend_of_run(run.pk).costs == {"USD": total}
    assert spend_of_conversation(conversation.pk).costs == {"USD": total}
    person = spend_of_person(alice.pk)
    assert (person.costs, person.turns, person.prompt_tokens) == ({"USD": total}, 3, 3700)
    assert person.cost_known


def test_a_model_with_no_price_is_price_unknown_not_free(alice, settings, workspaces):
    settings.LOOP_PRICES = '{"another-model": {"input": 1, "output": 2}}'
    run = worked(alice, TURNS)

    assert set(
        Charge.objects.filter(run_id=run.pk, kind="turn").values_list("cost", "currency")
    ) == {(None, "")}
    spent = spend_of_run(run.pk)
    assert (spent.costs, spent.unpriced_turns, spent.cost_known) == ({}, 3, False)
    assert spent.total_tokens == 3700 + 100


def test_a_price_from_the_console_takes_over_from_its_moment_on(alice, settings, workspaces):
    settings.LOOP_PRICES = PRICES
    first = worked(alice, TURNS)
    Price.objects.create(
        model="mock",
        input=Decimal(3),
        output=Decimal(6),
        currency="EUR",
        effective_from=timezone.now(),
    )
    Price.objects.create(  # not in force yet: it changes nothing
        model="mock",
        input=Decimal(100),
        output=Decimal(100),
        effective_from=timezone.now() + timedelta(days=1),
    )
    second = worked(alice, [answer("done", usage=Usage(1_000_000, 1_000_000))])

    assert spend_of_run(first.pk).costs == {
        "USD": sum((cost(1000, 20), cost(1200, 30, 800), cost(1500, 50, 1000)), Decimal(0))
    }
    assert spend_of_run(second.pk).costs == {"EUR": Decimal(9)}
    assert spend_of_person(alice.pk).costs.keys() == {"USD", "EUR"}


def test_an_accounts_charges_outlive_it_under_an_anonymous_id(alice, bob, settings, workspaces):
    settings.LOOP_PRICES = PRICES
    run = worked(alice, TURNS)
    worked(bob, TURNS)
    before = Charge.objects.filter(run_id=run.pk, kind="turn").values_list("cost", flat=True)
    expected = sorted(before)

    alice.delete()

    left = Charge.objects.filter(run_id=run.pk, kind="turn")
    assert sorted(left.values_list("cost", flat=True)) == expected
    anonymous = set(left.values_list("user_id", "person"))
    assert len(anonymous) == 1
    ((user_id, person),) = anonymous
    assert user_id is None
    assert person.startswith("deleted-")
    assert Charge.objects.filter(user=bob, person="", kind="turn").count() == 3


def test_a_price_cannot_take_effect_in_the_past_or_before_every_process_has_it():
    backdated = Price(model="mock", input=1, output=1, effective_from=timezone.now())
    with pytest.raises(ValidationError, match="a minute from now at the earliest"):
        backdated.full_clean()
    Price(model="mock", input=1, output=1).full_clean()  # the default: a minute from now
