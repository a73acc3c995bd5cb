"""The price table of the environment (LOOP_PRICES) read exactly, or refused clearly; a turn's
cost computed in decimals; cached prompt tokens read from a provider's usage."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from accounting.prices import BEGINNING, Rate, parse_prices
from agent.llm.replies import usage_of
from core.llm import Usage

pytestmark = pytest.mark.fast


def test_prices_are_read_as_decimals_never_floats():
    table = parse_prices('{"m": {"input": 0.1, "output": 0.2, "cached_input": 0.05}}')
    (rate,) = table["m"]
    assert (rate.input, rate.output, rate.cached_input) == (
        Decimal("0.1"),
        Decimal("0.2"),
        Decimal("0.05"),
    )
    assert (rate.currency, rate.effective_from) == ("USD", BEGINNING)
    # 0.1 + 0.2 in floats is 0.30000000000000004; in decimals, 0.3
    assert rate.cost(1_000_000, 1_000_000) == Decimal("0.300000000000")


def test_a_model_may_have_its_history_of_prices():
    table = parse_prices(
        '{"m": [{"input": 1, "output": 2, "currency": "eur"},'
        ' {"input": 3, "output": 4, "effective_from": "2026-06-01T12:00:00+02:00"}]}'
    )
    old, new = table["m"]
    assert old.currency == "EUR"
    assert new.effective_from == datetime(2026, 6, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{nope", "not JSON"),
        ("[1]", "JSON object"),
        ('{"m": 3}', "must be an object"),
        ('{"m": {"input": 1}}', "output must be a number"),
        ('{"m": {"input": -1, "output": 1}}', "input must be a number of at least 0"),
        ('{"m": {"input": "NaN", "output": 1}}', "input must be a number"),
        ('{"m": {"input": 1, "output": 1, "currency": "dollars"}}', "currency code"),
        ('{"m": {"input": 1, "output": 1, "effective_from": "soon"}}', "a date"),
        ('{"m": {"input": 1, "output": 1, "inputs": 2}}', "unknown keys: inputs"),
    ],
)
def test_a_wrong_price_table_is_refused_saying_where(raw, says):
    with pytest.raises(ImproperlyConfigured, match=says):
        parse_prices(raw)


def test_cached_tokens_cost_the_cached_price_or_the_input_price_when_there_is_none():
    at = BEGINNING
    with_cache = Rate("m", Decimal(2), Decimal(8), Decimal(1), "USD", at)
    without = Rate("m", Decimal(2), Decimal(8), None, "USD", at)
    assert with_cache.cost(1000, 100, 400) == Decimal("0.002400000000")  # 600x2 + 400x1 + 100x8
    assert without.cost(1000, 100, 400) == Decimal("0.002800000000")
    assert with_cache.cost(10, 0, 99) == Decimal("0.000010000000")  # never more cached than sent


def test_a_providers_cached_tokens_are_read_and_bounded():
    assert usage_of(
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 64},
        }
    ) == Usage(100, 5, 64)
    assert usage_of({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 99}}) == (
        Usage(10, 0, 10)
    )
    assert usage_of({"prompt_tokens": 10, "prompt_tokens_details": "lies"}) == Usage(10, 0, 0)
