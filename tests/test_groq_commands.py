"""The commands a person uses with a Groq key: `groqcheck`, and `runagent`'s transcript on Groq."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.groq_server import MODELS_PATH, groq_server_fixture, tool_call  # noqa: F401

GPT_OSS = "openai/gpt-oss-120b"


@pytest.fixture
def keyed(settings, groq_server):
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = GPT_OSS
    settings.LOOP_GROQ_MAX_RETRIES = 0
    return groq_server


def groqcheck(*args: str) -> str:
    out = StringIO()
    call_command("groqcheck", *args, stdout=out)
    return out.getvalue()


def test_groqcheck_lists_the_models_finds_the_configured_one_and_proves_a_tool_call(keyed):
    keyed.reply(tool_calls=[tool_call("add", {"a": 2, "b": 3})], usage=(80, 12))

    out = groqcheck()

    assert "Models this key can use (5):" in out
    assert f"  {GPT_OSS}  <- configured" in out
    assert "  qwen/qwen3.6-27b\n" in out
    assert f"The configured model '{GPT_OSS}' is among them." in out
    assert f'Tool call: {GPT_OSS} called add({{"a": 2, "b": 3}})' in out
    assert "92 tokens. Groq works." in out
    listing, chat = keyed.requests
    assert (listing.method, listing.path) == ("GET", MODELS_PATH)
    assert chat.body["tools"][0]["function"]["name"] == "add"
    assert chat.body["reasoning_effort"] == "medium"


def test_groqcheck_says_when_the_configured_model_is_gone(keyed, settings):
    settings.LOOP_GROQ_MODEL = "llama-3.3-70b-versatile"

    with pytest.raises(
        CommandError, match=r"'llama-3\.3-70b-versatile' is not among them"
    ) as error:
        groqcheck()

    assert error.value.returncode == 1
    assert len(keyed.requests) == 1  # the listing only: no chat request for a missing model


def test_groqcheck_fails_when_the_model_answers_without_calling_the_tool(keyed):
    keyed.reply("2 + 3 = 5")

    with pytest.raises(CommandError, match="answered without calling the tool: '2 \\+ 3 = 5'"):
        groqcheck()


def test_groqcheck_reports_a_rejected_key(keyed):
    keyed.fail(401, "Invalid API Key", code="invalid_api_key")

    with pytest.raises(CommandError, match="Groq answered 401: Invalid API Key") as error:
        groqcheck()

    assert error.value.returncode == 1
    assert keyed.pending == 0


def test_groqcheck_without_a_key_says_there_is_nothing_to_check(settings):
    settings.GROQ_API_KEY = ""

    with pytest.raises(CommandError, match="GROQ_API_KEY is not set") as error:
        groqcheck()

    assert error.value.returncode == 2


def test_runagent_on_groq_shows_loops_steps_and_reasoning_not_http_logs(
    manage, child_database_url, workspaces, groq_server
):
    def script() -> None:
        groq_server.reply(
            tool_calls=[tool_call("list_files", {})],
            reasoning="The user wants to see the files.\nlist_files does that.",
        )
        groq_server.reply("Your workspace is empty.")

    env = {
        "DATABASE_URL": child_database_url,
        "LOOP_WORKSPACES_DIR": str(workspaces),
        "GROQ_API_KEY": "gsk_test_key",
        "GROQ_BASE_URL": groq_server.base_url,
        "LOOP_GROQ_MODEL": GPT_OSS,
    }
    script()
    quiet = manage("runagent", "List my files", env=env)
    script()
    verbose = manage("runagent", "List my files", "-v", "2", env=env)

    assert quiet.returncode == 0, quiet.stderr
    assert (
        "step 1  reasoning: The user wants to see the files. list_files does that." in quiet.stdout
    )
    assert "step 1  list_files {}" in quiet.stdout
    assert "Your workspace is empty." in quiet.stdout
    assert "HTTP Request" not in quiet.stdout + quiet.stderr
    assert verbose.returncode == 0, verbose.stderr
    assert "step 1  reasoning:\nThe user wants to see the files.\nlist_files does that." in (
        verbose.stdout
    )
    assert "HTTP Request: POST" in verbose.stderr
