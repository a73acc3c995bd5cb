"""The dispatcher turns every way a call can go wrong into an error result, never an exception."""

import json
import threading

import pytest
from pydantic import BaseModel

from agent.toolset import default_registry
from core.results import ToolStatus
from tools.base import Tool, ToolContext, ToolError, ToolRegistry, truncate

pytestmark = pytest.mark.fast


class EchoArguments(BaseModel):
    text: str
    times: int = 1


def echo(arguments: EchoArguments, context: ToolContext) -> str:
    return arguments.text * arguments.times


def explode(arguments: EchoArguments, context: ToolContext) -> str:
    raise KeyError("boom")


def refuse(arguments: EchoArguments, context: ToolContext) -> str:
    raise ToolError("try something else")


released = threading.Event()
hang_ended = threading.Event()


def hang(arguments: EchoArguments, context: ToolContext) -> str:
    released.wait(10)
    hang_ended.set()
    return "too late"


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool("echo", "Echo text.", EchoArguments, echo),
            Tool("explode", "Raise.", EchoArguments, explode),
            Tool("refuse", "Refuse.", EchoArguments, refuse),
            Tool("hang", "Hang.", EchoArguments, hang, timeout=0.2),
        ],
        max_result_chars=100,
    )


@pytest.fixture
def context(tmp_path) -> ToolContext:
    return ToolContext(user_id=1, username="alice", workspace=tmp_path)


def test_a_valid_call_returns_ok_with_its_text_and_duration(registry, context):
    result = registry.dispatch("echo", '{"text": "hi", "times": 2}', context)
    assert result.status is ToolStatus.OK
    assert result.text == "hihi"
    assert result.duration >= 0


def test_unknown_tool_is_an_error_listing_the_real_ones(registry, context):
    result = registry.dispatch("rm_rf", "{}", context)
    assert result.status is ToolStatus.ERROR
    assert "Unknown tool 'rm_rf'" in result.text
    assert "echo, explode, hang, refuse" in result.text


@pytest.mark.parametrize("raw", ['{"text": ', "not json", "[1, 2", '{"text": "a",}'])
def test_malformed_json_is_an_error(registry, context, raw):
    result = registry.dispatch("echo", raw, context)
    assert result.status is ToolStatus.ERROR
    assert "not valid JSON" in result.text


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{}", "text: Field required"),
        ('{"text": "a", "times": "many"}', "times: Input should be a valid integer"),
        ('["a"]', "arguments: Input should be a valid dictionary"),
    ],
)
def test_invalid_arguments_are_an_error_naming_the_field(registry, context, raw, problem):
    result = registry.dispatch("echo", raw, context)
    assert result.status is ToolStatus.ERROR
    assert result.text.startswith("Invalid arguments for echo:")
    assert problem in result.text


def test_a_raising_tool_is_an_error_not_a_crash(registry, context):
    result = registry.dispatch("explode", '{"text": "a"}', context)
    assert result.status is ToolStatus.ERROR
    assert "explode failed: KeyError" in result.text


def exits(arguments: EchoArguments, context: ToolContext) -> str:
    raise SystemExit(3)


@pytest.mark.parametrize("own_deadline", [False, True])
def test_a_tool_calling_exit_is_an_error_not_the_end_of_the_worker(context, own_deadline):
    registry = ToolRegistry(
        [Tool("exits", "Exit.", EchoArguments, exits, own_deadline=own_deadline)]
    )
    result = registry.dispatch("exits", '{"text": "a"}', context)
    assert result.status is ToolStatus.ERROR
    assert "exits failed: SystemExit" in result.text


def test_a_tool_error_reaches_the_model_as_its_message(registry, context):
    result = registry.dispatch("refuse", '{"text": "a"}', context)
    assert (result.status, result.text) == (ToolStatus.ERROR, "try something else")


def test_a_hung_tool_times_out(registry, context):
    result = registry.dispatch("hang", '{"text": "a"}', context)
    still_hung = not hang_ended.is_set()  # it did not wait for the tool to end
    released.set()
    assert result.status is ToolStatus.TIMEOUT
    assert "did not finish within 0.2 seconds" in result.text
    assert still_hung


def test_long_output_is_truncated_with_a_note(registry, context):
    result = registry.dispatch("echo", '{"text": "abcdefghij", "times": 50}', context)
    assert result.truncated
    assert "truncated: 400 of 500 characters omitted" in result.text
    assert result.text.startswith("abcdefghij")
    assert result.text.endswith("abcdefghij")


def test_truncate_leaves_short_text_alone():
    assert truncate("short", 10) == ("short", False)


def test_specs_give_the_model_the_documented_argument_names():
    specs = {spec["function"]["name"]: spec for spec in default_registry().specs()}
    parameters = {name: spec["function"]["parameters"] for name, spec in specs.items()}
    assert set(parameters) == {
        "run_code",
        "read_file",
        "write_file",
        "list_files",
        "web_search",
        "remember",
    }
    assert set(parameters["run_code"]["properties"]) == {"code", "timeout"}
    assert parameters["run_code"]["required"] == ["code"]
    assert set(parameters["read_file"]["properties"]) == {"path"}
    assert set(parameters["write_file"]["properties"]) == {"path", "content"}
    assert parameters["list_files"].get("required", []) == []
    assert set(parameters["web_search"]["properties"]) == {"query", "max_results"}
    assert set(parameters["remember"]["properties"]) == {"fact", "importance"}
    assert all(
        spec["type"] == "function" and spec["function"]["description"] for spec in specs.values()
    )
    json.dumps(list(specs.values()))  # what goes over the wire must be plain JSON
