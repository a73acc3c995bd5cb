"""LOOP_QUOTA's syntax (accounting/quotas.py): what it reads, and the clear error for what it
cannot, named item by item."""

from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from accounting.models import Measure, Period
from accounting.quotas import Limit, parse_quota

pytestmark = pytest.mark.fast


def test_the_issues_example_reads_as_three_calendar_quotas():
    assert parse_quota("runs=50/day,tokens=2000000/month,cost=5/month") == (
        Limit(Measure.RUNS, Decimal(50), Period.DAY),
        Limit(Measure.TOKENS, Decimal(2_000_000), Period.MONTH),
        Limit(Measure.COST, Decimal(5), Period.MONTH, currency="USD"),
    )


def test_a_rolling_window_a_currency_and_spaces_are_read():
    assert parse_quota(" cost=2.50EUR/rolling-week , runs=3/rolling-day ") == (
        Limit(Measure.COST, Decimal("2.50"), Period.WEEK, rolling=True, currency="EUR"),
        Limit(Measure.RUNS, Decimal(3), Period.DAY, rolling=True),
    )


def test_nothing_set_is_no_quota():
    assert parse_quota("") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("runs=50", "'runs=50' is not MEASURE=LIMIT/PERIOD"),
        ("runs=50/year", "no period 'year'"),
        ("money=5/day", "no measure 'money'"),
        ("tokens=1.5/day", "counted in whole numbers"),
        ("runs=5USD/day", "counted in whole numbers"),
        ("runs=-1/day", "'runs=-1/day' is not MEASURE=LIMIT/PERIOD"),
        ("runs=50/day;tokens=5/day", "is not MEASURE=LIMIT/PERIOD"),
    ],
)
def test_a_bad_item_is_refused_by_name_with_the_syntax(text, says):
    with pytest.raises(ImproperlyConfigured) as refused:
        parse_quota(text)
    assert says in str(refused.value)
    assert "LOOP_QUOTA" in str(refused.value)


def test_a_limit_says_itself_in_words():
    assert Limit(Measure.RUNS, Decimal(1), Period.DAY).in_words() == "1 run a day"
    assert (
        Limit(Measure.TOKENS, Decimal(20000), Period.WEEK, rolling=True).in_words()
        == "20,000 tokens in 7 days"
    )
    assert Limit(Measure.COST, Decimal("5.00"), Period.MONTH).in_words() == "5 USD a month"
