"""`manage.py modelcheck` against the fake OpenAI-compatible server (and Groq's, for the alias),
and the system checks of the model settings."""

import re
import socket
from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.management.commands.modelcheck import ADD_TASK
from tests.chat_server import no_proxies
from tests.groq_server import groq_server_fixture  # noqa: F401
from tests.openai_server import (  # noqa: F401
    MODEL,
    MODELS_PATH,
    FakeOpenAIServer,
    openai_server_fixture,
    tool_call,
)
from tests.test_settings import PRODUCTION

ADD_2_AND_3 = [tool_call("add", {"a": 2, "b": 3})]


@pytest.fixture
def served(nothing_configured, openai_server):
    """Runs use MODEL on the fake server, as LOOP_OPENAI_BASE_URL and LOOP_OPENAI_MODEL say."""
    nothing_configured.LOOP_OPENAI_BASE_URL = openai_server.base_url
    nothing_configured.LOOP_OPENAI_MODEL = MODEL
    return openai_server


def modelcheck(*args: str, command: str = "modelcheck") -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def failed_check(*args: str, command: str = "modelcheck") -> CommandError:
    with pytest.raises(CommandError) as error:
        modelcheck(*args, command=command)
    return error.value


def free_port() -> int:
    """A port nothing listens on (it was bound and released: the kernel refuses connections)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- modelcheck on an OpenAI-compatible server ----------------------------------------------


def test_modelcheck_lists_the_models_finds_the_configured_one_and_proves_a_tool_call(served):
    served.reply(tool_calls=ADD_2_AND_3, usage=(40, 8))

    out = modelcheck()

    server = f"the model server at {served.base_url}"
    assert f"Models {server} lists (2):\n  {MODEL}  <- configured\n  qwen3:8b\n" in out
    assert f"The configured model '{MODEL}' is among them." in out
    assert f'Tool call: {MODEL} called add({{"a": 2, "b": 3}})' in out
    assert f"48 tokens. The model server at {served.base_url} works." in out
    listing, chat = served.requests
    assert (listing.method, listing.path) == ("GET", MODELS_PATH)
    # A run's request: streamed, asking for usage, the tool offered with tool_choice auto.
    assert chat.body["model"] == MODEL
    assert chat.body["messages"] == ADD_TASK
    assert [tool["function"]["name"] for tool in chat.body["tools"]] == ["add"]
    assert chat.body["tool_choice"] == "auto"
    assert chat.body["stream"] is True
    assert chat.body["stream_options"] == {"include_usage": True}
    assert "reasoning_effort" not in chat.body


def test_modelcheck_checks_the_model_given_in_the_naming_scheme(served):
    served.reply(tool_calls=ADD_2_AND_3)

    out = modelcheck("--model", "openai:qwen3:8b")

    assert f"  {MODEL}\n  qwen3:8b  <- configured\n" in out
    assert "The model 'qwen3:8b' is among them." in out
    assert served.requests[1].body["model"] == "qwen3:8b"


def test_modelcheck_shows_a_long_catalogue_cut_short_but_always_the_configured_model(
    nothing_configured, monkeypatch
):
    no_proxies(monkeypatch)
    catalogue = [f"vendor/model-{number:02d}" for number in range(45)]
    with FakeOpenAIServer(models=catalogue) as router:
        router.reply(tool_calls=ADD_2_AND_3)
        nothing_configured.LOOP_OPENAI_BASE_URL = router.base_url
        nothing_configured.LOOP_OPENAI_MODEL = "vendor/model-44"

        out = modelcheck()

    assert router.unexpected == []
    assert "lists (45):\n  vendor/model-00\n" in out
    assert "  vendor/model-39\n  vendor/model-44  <- configured\n  ... and 4 more\n" in out
    assert "vendor/model-40" not in out
    assert "The configured model 'vendor/model-44' is among them." in out


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("LOOP_OPENAI_MODEL", "mistral:7b", "Set LOOP_OPENAI_MODEL to one that is."),
        ("LOOP_MODEL", "openai:mistral:7b", "Set LOOP_MODEL to one that is."),
        ("LOOP_MODELS", ["openai:mistral:7b", "mock"], "Set LOOP_MODELS to one that is."),
    ],
)
def test_modelcheck_says_the_model_is_not_listed_and_which_setting_named_it(
    served, settings, setting, value, named
):
    setattr(settings, setting, value)

    error = failed_check()

    assert error.returncode == 1
    assert f"'mistral:7b' is not among them. {named}" in str(error)
    assert "`ollama pull mistral:7b` fetches it" in str(error)
    assert len(served.requests) == 1  # the listing only: no chat request for a missing model


def test_modelcheck_fails_when_the_model_answers_without_calling_the_tool(served):
    served.reply("2 + 3 = 5")

    error = failed_check()

    assert error.returncode == 1
    assert f"{MODEL} answered without calling the tool: '2 + 3 = 5'" in str(error)
    assert "--enable-auto-tool-choice" in str(error)
    assert "--jinja" in str(error)


def test_modelcheck_fails_when_the_server_cannot_take_tools(served):
    served.behave(no_tools="ollama")

    error = failed_check()

    assert error.returncode == 1
    assert f"{MODEL} on the model server at {served.base_url} cannot call tools" in str(error)
    assert served.pending == 0


def test_modelcheck_names_the_server_that_is_down_without_its_password(nothing_configured):
    port = free_port()
    nothing_configured.LOOP_OPENAI_BASE_URL = f"http://loop:hunter2@127.0.0.1:{port}/v1"
    nothing_configured.LOOP_OPENAI_MODEL = MODEL

    error = failed_check()

    assert error.returncode == 1
    assert "Could not list the model server's models: Could not reach the model server at " in (
        str(error)
    )
    assert f"http://127.0.0.1:{port}/v1" in str(error)
    assert "LOOP_OPENAI_BASE_URL" in str(error)
    assert "hunter2" not in str(error)


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("sk-wrong", "Set LOOP_OPENAI_API_KEY to a key it takes."),
        ("", "LOOP_OPENAI_API_KEY is not set, and this server wants a key: set it."),
    ],
)
def test_modelcheck_says_which_setting_holds_the_key_the_server_refused(
    served, settings, key, hint
):
    served.behave(requires_key="sk-right")
    settings.LOOP_OPENAI_API_KEY = key

    error = failed_check()

    assert error.returncode == 1
    assert f"The model server at {served.base_url} answered 401: Incorrect API key" in str(error)
    assert str(error).endswith(hint)
    assert len(served.requests) == 1


def test_modelcheck_lists_the_models_to_pick_from_when_none_is_named(served, settings):
    settings.LOOP_OPENAI_MODEL = ""

    out = StringIO()
    with pytest.raises(CommandError, match="no model is named: set LOOP_OPENAI_MODEL") as error:
        call_command("modelcheck", stdout=out)

    assert error.value.returncode == 1
    assert f"lists (2):\n  {MODEL}\n  qwen3:8b\n" in out.getvalue()


def test_modelcheck_runs_even_when_the_system_checks_fail(manage, openai_server):
    # LOOP_OPENAI_MODEL unset is a system check error (agent.E001), the mistake modelcheck helps
    # with: from the command line it still runs, lists the models and exits 1.
    env = {"LOOP_OPENAI_BASE_URL": openai_server.base_url, "LOOP_OPENAI_MODEL": ""}

    result = manage("modelcheck", env=env)

    assert result.returncode == 1, result.stderr
    assert f"  {MODEL}\n  qwen3:8b\n" in result.stdout
    assert "SystemCheckError" not in result.stderr
    assert "no model is named: set LOOP_OPENAI_MODEL" in result.stderr


def test_modelcheck_without_a_base_url_has_nothing_to_check(nothing_configured):
    nothing_configured.LOOP_MODEL = f"openai:{MODEL}"

    error = failed_check()

    assert error.returncode == 2
    assert "needs LOOP_OPENAI_BASE_URL" in str(error)
    assert "There is nothing to check." in str(error)


def test_modelcheck_on_the_mock_model_has_nothing_to_check(nothing_configured):
    error = failed_check()

    assert error.returncode == 2
    assert "The model is 'mock', Loop's keyless mock model: there is nothing to check." in (
        str(error)
    )
    assert "LOOP_OPENAI_BASE_URL" in str(error)


# --- groqcheck, the alias for Groq ----------------------------------------------------------


def without_timing(out: str) -> str:
    return re.sub(r" in \d+\.\d\ds,", " in _s,", out)


def test_groqcheck_is_modelcheck_for_groq(nothing_configured, groq_server):
    nothing_configured.GROQ_API_KEY = "gsk_test_key"
    nothing_configured.GROQ_BASE_URL = groq_server.base_url
    nothing_configured.LOOP_GROQ_MAX_RETRIES = 0
    groq_server.reply(tool_calls=ADD_2_AND_3, usage=(80, 12))
    groq_server.reply(tool_calls=ADD_2_AND_3, usage=(80, 12))

    by_groqcheck = modelcheck(command="groqcheck")
    by_modelcheck = modelcheck()

    assert "92 tokens. Groq works." in by_groqcheck
    assert without_timing(by_groqcheck) == without_timing(by_modelcheck)
    first, second = groq_server.requests[1].body, groq_server.requests[3].body
    assert first == second


def test_groqcheck_checks_groq_even_when_a_model_server_has_a_model_of_that_name(
    served, settings, groq_server
):
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_OPENAI_MODEL = settings.LOOP_GROQ_MODEL = "openai/gpt-oss-120b"  # OpenRouter's
    settings.LOOP_MODEL = f"openai:{MODEL}"
    groq_server.reply(tool_calls=ADD_2_AND_3)

    out = modelcheck(command="groqcheck")

    assert "The configured model 'openai/gpt-oss-120b' is among them." in out
    assert "Groq works." in out
    assert served.requests == []


def test_groqcheck_refuses_a_model_that_is_not_groqs(nothing_configured):
    nothing_configured.GROQ_API_KEY = "gsk_test_key"

    error = failed_check("--model", f"openai:{MODEL}", command="groqcheck")

    assert error.returncode == 2
    assert f"'openai:{MODEL}' is not a Groq model. `manage.py modelcheck --model" in str(error)


# --- system checks of the model settings ----------------------------------------------------


def model_checks() -> list[tuple[str, str]]:
    return [(message.id, message.msg) for message in run_checks(tags=["llm"])]


def test_the_default_settings_pass_the_model_checks(nothing_configured):
    assert model_checks() == []


def test_a_configured_model_server_passes_the_model_checks(nothing_configured):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:11434/v1"
    nothing_configured.LOOP_OPENAI_MODEL = MODEL
    nothing_configured.LOOP_MODELS = [f"openai:{MODEL}", "openai:qwen3:8b", "mock"]

    assert model_checks() == []


def test_a_base_url_without_a_model_for_runs_is_an_error(nothing_configured):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:11434/v1"

    [(check_id, message)] = model_checks()

    assert check_id == "agent.E001"
    assert "LOOP_OPENAI_BASE_URL is set but LOOP_OPENAI_MODEL is not" in message


def test_a_base_url_that_no_setting_names_a_model_on_is_a_warning(nothing_configured):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:11434/v1"
    nothing_configured.GROQ_API_KEY = "gsk_test_key"

    [(check_id, message)] = model_checks()

    assert check_id == "agent.W001"
    assert "no run uses the model server" in message


def test_a_base_url_with_its_models_named_in_loop_models_needs_no_loop_openai_model(
    nothing_configured,
):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:11434/v1"
    nothing_configured.LOOP_MODELS = ["openai:qwen3:8b", "mock"]

    assert model_checks() == []


def test_a_loop_model_that_cannot_run_here_is_an_error_naming_it(nothing_configured):
    nothing_configured.LOOP_MODEL = "openai:qwen3:8b"

    [(check_id, message)] = model_checks()

    assert check_id == "agent.E002"
    assert message.startswith("LOOP_MODEL names 'openai:qwen3:8b', which cannot run here")
    assert "needs LOOP_OPENAI_BASE_URL" in message


def test_loop_models_entries_that_cannot_run_here_are_named(nothing_configured):
    nothing_configured.LOOP_MODELS = ["groq:openai/gpt-oss-20b", "mock", "openai:qwen3:8b"]

    found = model_checks()

    assert [check_id for check_id, _ in found] == ["agent.E003", "agent.W002"]
    default, other = (message for _, message in found)
    assert "LOOP_MODELS names 'groq:openai/gpt-oss-20b'" in default
    assert "it is the default model" in default
    assert "needs GROQ_API_KEY" in default
    assert "LOOP_MODELS names 'openai:qwen3:8b'" in other
    assert "it is not offered for a conversation" in other


def test_the_deploy_check_stays_clean_with_a_model_server_configured(manage):
    env = {
        **PRODUCTION,
        "LOOP_OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
        "LOOP_OPENAI_MODEL": MODEL,
        "LOOP_MODELS": f"openai:{MODEL},mock",
    }

    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_manage_check_stops_on_a_loop_model_that_cannot_run_here(manage):
    result = manage("check", env={"LOOP_MODEL": "groq:openai/gpt-oss-20b", "GROQ_API_KEY": ""})

    assert result.returncode == 1
    assert "(agent.E002) LOOP_MODEL names 'groq:openai/gpt-oss-20b'" in result.stderr
