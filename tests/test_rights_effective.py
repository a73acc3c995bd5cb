"""A person's rights are the union of their groups', a tool asks only where every group granting
it asks, and a run's record narrows by the rights as they stand (fast: no database)."""

import pytest

from rights.effective import EVERYTHING, NOTHING, Rights, united

pytestmark = pytest.mark.fast


def test_the_union_of_groups_allows_what_any_allows() -> None:
    writers = Rights(models=frozenset({"mock"}), tools=frozenset({"read_file"}))
    coders = Rights(models=frozenset({"groq:x"}), tools=frozenset({"run_code"}))
    both = united([writers, coders])
    assert both.models == {"mock", "groq:x"}
    assert both.tools == {"read_file", "run_code"}
    assert united([writers, EVERYTHING]).tools is None


def test_a_tool_asks_only_where_every_group_granting_it_asks() -> None:
    careful = Rights(tools=frozenset({"run_code"}), ask=frozenset({"run_code"}))
    others = Rights(tools=frozenset({"read_file"}))
    assert united([careful, others]).ask == {"run_code"}  # the other group does not grant it
    relaxed = Rights(tools=frozenset({"run_code"}))
    assert united([careful, relaxed]).ask == frozenset()


def test_a_record_narrows_and_round_trips() -> None:
    recorded = Rights(tools=frozenset({"run_code", "read_file"}), ask=frozenset({"read_file"}))
    now = Rights(tools=frozenset({"read_file"}), memory=False)
    narrowed = recorded.narrowed(now)
    assert narrowed.tools == {"read_file"}
    assert not narrowed.memory
    assert Rights.from_record(narrowed.record()) == narrowed
    assert Rights.from_record({}) == EVERYTHING
    assert not NOTHING.allows_model("mock")
    assert not NOTHING.allows_tool("run_code")
    assert NOTHING.allows_tool("x__y", server_id=None) is False
