"""The console's costs: the price table (a price in effect is never edited), the cost report per
person, group, model and day with its CSV, and totals that survive deleting a conversation, a
person's own account, or an account from the console."""

import csv
import io
from datetime import datetime, timedelta
from decimal import Decimal

import lxml.html
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import Charge, Price
from agent.llm.scripted import ScriptedLLM, answer, call
from agent.runs import new_conversation, start_run
from core.llm import Usage
from engine.execution import execute_run
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

REPORT = reverse("admin:accounting_charge_report")
PRICES = reverse("admin:accounting_price_changelist")


def charge(user: User | None, model: str, cost: str | None, at: datetime, **tokens: int) -> None:
    Charge.objects.create(
        user=user,
        person="" if user else "deleted-0123456789abcdef01234567",
        run_id=1,
        model=model,
        prompt_tokens=tokens.get("prompt", 100),
        completion_tokens=tokens.get("completion", 10),
        cached_tokens=tokens.get("cached", 0),
        cost=None if cost is None else Decimal(cost),
        currency="" if cost is None else "USD",
        at=at,
    )


def table(page: str) -> list[list[str]]:
    """The report's rows, as the page shows them."""
    tree = lxml.html.fromstring(page)
    return [
        [cell.text_content().strip() for cell in row]
        for row in tree.xpath("//table[@id='costs']/tbody/tr")
    ]


def header(page: str) -> dict[str, str]:
    tree = lxml.html.fromstring(page)
    return {
        link.text_content().strip(): link.get("href")
        for link in tree.xpath("//table[@id='costs']/thead//a")
    }


@pytest.fixture
def ledger(alice, bob) -> None:
    """Alice in two groups, bob in one; a deleted account's turn; a model with no price."""
    staff, research = Group.objects.create(name="staff"), Group.objects.create(name="research")
    alice.groups.add(staff, research)
    bob.groups.add(staff)
    now = timezone.now()
    charge(alice, "gpt-4o-mini", "0.000150000000", now, prompt=1000, completion=100, cached=200)
    charge(alice, "gpt-4o-mini", "0.000250000000", now - timedelta(days=1))
    charge(alice, "unpriced-model", None, now)
    charge(bob, "llama-3.3-70b", "0.002000000000", now, prompt=3000, completion=300)
    charge(None, "llama-3.3-70b", "0.000010000000", now - timedelta(days=2))


def test_costs_per_person_with_an_anonymous_id_and_price_unknown_never_0(client, operator, ledger):
    page = client.get(REPORT).text
    assert table(page) == [
        ["alice", "—", "1", "100", "10", "0", "price unknown"],
        ["alice", "USD", "2", "1100", "110", "200", "0.0004"],
        ["bob", "USD", "1", "3000", "300", "0", "0.002"],
        ["deleted-0123456789abcdef01234567", "USD", "1", "100", "10", "0", "0.00001"],
    ]
    total = lxml.html.fromstring(page).xpath("//td[@id='cost-total']")[0].text_content()
    assert total.strip() == "0.00241 USD; 1 turn price unknown"


def test_a_person_in_two_groups_counts_in_both(client, operator, ledger):
    page = client.get(REPORT, {"by": "group"}).text
    assert "A person in two groups counts in both" in page
    assert table(page) == [
        ["(no group)", "USD", "1", "100", "10", "0", "0.00001"],
        ["research", "—", "1", "100", "10", "0", "price unknown"],
        ["research", "USD", "2", "1100", "110", "200", "0.0004"],
        ["staff", "—", "1", "100", "10", "0", "price unknown"],
        ["staff", "USD", "3", "4100", "410", "200", "0.0024"],
    ]


def test_costs_per_model_and_per_day(client, operator, ledger):
    by_model = table(client.get(REPORT, {"by": "model"}).text)
    assert [row[0] for row in by_model] == ["gpt-4o-mini", "llama-3.3-70b", "unpriced-model"]
    assert by_model[1][-1] == "0.00201"
    today = timezone.localdate()
    by_day = table(client.get(REPORT, {"by": "day"}).text)
    assert [(row[0], row[-1]) for row in by_day] == [
        (f"{today - timedelta(days=2):%Y-%m-%d}", "0.00001"),
        (f"{today - timedelta(days=1):%Y-%m-%d}", "0.00025"),
        (f"{today:%Y-%m-%d}", "price unknown"),
        (f"{today:%Y-%m-%d}", "0.00215"),
    ]
    # The range chosen: yesterday alone.
    yesterday = f"{today - timedelta(days=1):%Y-%m-%d}"
    shown = table(client.get(REPORT, {"by": "day", "since": yesterday, "until": yesterday}).text)
    assert [row[0] for row in shown] == [yesterday]


def test_each_column_sorts_both_ways_an_unknown_cost_last(client, operator, ledger):
    page = client.get(REPORT).text
    by_cost = client.get(REPORT + header(page)["cost"]).text
    assert [row[-1] for row in table(by_cost)] == ["0.00001", "0.0004", "0.002", "price unknown"]
    descending = client.get(REPORT + header(by_cost)["cost"]).text
    assert [row[-1] for row in table(descending)] == ["0.002", "0.0004", "0.00001", "price unknown"]
    by_tokens = client.get(REPORT + header(page)["prompt tokens"]).text
    assert [row[3] for row in table(by_tokens)] == ["100", "100", "1100", "3000"]


@pytest.mark.parametrize("by", ["person", "group", "model", "day"])
def test_the_csv_has_the_pages_rows(client, operator, ledger, by):
    page = client.get(REPORT, {"by": by, "sort": "-turns"}).text
    csv_link = lxml.html.fromstring(page).xpath("//a[@id='cost-csv']")[0].get("href")
    exported = client.get(REPORT + csv_link)
    assert exported["Content-Type"].startswith("text/csv")
    assert "attachment" in exported["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(exported.content.decode())))
    assert rows[0][0] == by
    shown = [[cell if cell != "—" else "" for cell in row] for row in table(page)]
    assert rows[1:] == shown


@pytest.mark.parametrize(
    ("since", "until"), [("0001-01-01", "9999-12-31"), ("2000-01-01", ""), ("", "2000-01-01")]
)
def test_a_range_to_the_calendars_edges_is_cut_to_what_can_be(
    client, operator, ledger, since, until
):
    response = client.get(REPORT, {"since": since, "until": until})
    assert response.status_code == 200
    if since == "0001-01-01":
        assert len(table(response.text)) == 4  # every turn


def test_a_range_that_starts_after_it_ends_says_so(client, operator, ledger):
    response = client.get(REPORT, {"since": "2026-02-02", "until": "2026-01-01"})
    assert response.status_code == 400
    assert "The range starts after it ends." in response.text


def test_only_operators_see_the_report(as_alice):
    assert as_alice.get(REPORT).status_code == 302  # to the console's login


# The price table


def test_an_operator_adds_a_price_which_names_them_and_starts_now(client, operator):
    before = timezone.now()
    response = client.post(
        reverse("admin:accounting_price_add"),
        {
            "model": "gpt-4o-mini",
            "input": "0.15",
            "output": "0.6",
            "cached_input": "0.075",
            "currency": "usd",
            "effective_from_0": f"{timezone.localtime(before):%Y-%m-%d}",
            "effective_from_1": f"{timezone.localtime(before):%H:%M:%S}",
        },
    )
    assert response.status_code == 302, response.text
    price = Price.objects.get()
    assert (price.created_by, price.currency, price.input) == (operator, "USD", Decimal("0.15"))
    assert price.effective_from >= before.replace(microsecond=0)


def test_a_price_cannot_start_in_the_past(client, operator):
    response = client.post(
        reverse("admin:accounting_price_add"),
        {
            "model": "gpt-4o-mini",
            "input": "0.15",
            "output": "0.6",
            "currency": "USD",
            "effective_from_0": "2020-01-01",
            "effective_from_1": "00:00:00",
        },
    )
    assert response.status_code == 200
    assert "A price cannot start in the past" in response.text
    assert not Price.objects.exists()


def test_a_price_in_effect_is_never_edited_nor_deleted(client, operator):
    price = Price.objects.create(model="m", input=1, output=2, effective_from=timezone.now())
    page = client.get(reverse("admin:accounting_price_change", args=[price.pk]))
    assert page.status_code == 200
    assert 'name="input"' not in page.text  # shown, not editable
    refused = client.post(
        reverse("admin:accounting_price_change", args=[price.pk]),
        {"model": "m", "input": "9", "output": "9", "currency": "USD"},
    )
    assert refused.status_code == 403
    deleted = client.post(
        reverse("admin:accounting_price_delete", args=[price.pk]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    price.refresh_from_db()
    assert price.input == 1
    scheduled = Price.objects.create(
        model="m", input=1, output=2, effective_from=timezone.now() + timedelta(days=1)
    )
    page = client.get(reverse("admin:accounting_price_change", args=[scheduled.pk]))
    assert 'name="input"' in page.text  # not in effect yet: it may still change


def test_the_prices_of_the_environment_show_read_only(client, operator, settings):
    settings.LOOP_PRICES = '{"llama-3.3-70b-versatile": {"input": 0.59, "output": 0.79}}'
    page = client.get(PRICES).text
    rows = lxml.html.fromstring(page).xpath("//div[@id='configured-prices']//tbody/tr")
    assert [cell.text_content() for cell in rows[0]] == [
        "llama-3.3-70b-versatile",
        "0.59",
        "0.79",
        "as input",
        "USD",
        "1970-01-01 00:00",
    ]


def test_the_ledger_is_read_only_even_for_a_superuser(client, operator, ledger):
    one = Charge.objects.first()
    assert client.get(reverse("admin:accounting_charge_changelist")).status_code == 200
    url = reverse("admin:accounting_charge_delete", args=[one.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Charge.objects.filter(pk=one.pk).exists()


# Deletions keep the totals


def spent_run(user: User) -> None:
    scripted = ScriptedLLM(
        [call("list_files", {}, usage=Usage(1000, 50)), answer("Empty.", usage=Usage(1100, 20))]
    )
    run = start_run(user, "List my files", model="mock", conversation=new_conversation(user))
    execute_run(run, llm=scripted)


@pytest.fixture
def two_people_ran(alice, bob, workspaces) -> None:
    Price.objects.create(
        model="mock", input=1, output=2, effective_from=timezone.now() - timedelta(days=1)
    )
    spent_run(alice)
    spent_run(bob)


def figures(client: Client) -> tuple[list[list[str]], str]:
    page = client.get(REPORT, {"by": "model"}).text
    total = lxml.html.fromstring(page).xpath("//td[@id='cost-total']")[0].text_content()
    return table(page), total


def test_deleting_a_conversation_keeps_the_totals(client, operator, alice, two_people_ran):
    before = figures(client)
    conversation = alice.conversations.get()
    owner = Client()
    owner.force_login(alice)
    owner.post(reverse("chat:delete", args=[conversation.pk]))
    conversation.refresh_from_db()
    assert conversation.deleted_at is not None
    assert figures(client) == before


def test_deleting_ones_account_keeps_the_totals_under_the_placeholders_name(
    client, operator, alice, two_people_ran, django_capture_on_commit_callbacks
):
    before, by_person = figures(client), table(client.get(REPORT).text)
    assert [row[0] for row in by_person] == ["alice", "bob"]
    owner = Client()
    owner.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = owner.post("/accounts/data/delete/", {"password": PASSWORD})
    assert response.status_code == 302
    assert figures(client) == before
    after = table(client.get(REPORT).text)
    placeholder = User.objects.get(username__startswith="deleted-").username
    assert [row[0] for row in after] == sorted([placeholder, "bob"])
    assert sorted(row[1:] for row in after) == sorted(row[1:] for row in by_person)


def test_an_account_deleted_from_the_console_keeps_the_totals(
    client, operator, alice, two_people_ran
):
    before = figures(client)
    alice.delete()
    assert figures(client) == before
    names = [row[0] for row in table(client.get(REPORT).text)]
    assert "alice" not in names
    assert any(name.startswith("deleted-") for name in names)
