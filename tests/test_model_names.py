"""Model names (LOOP_MODEL, LOOP_MODELS, `runagent --model`): which provider serves a name, which
model a run uses when none is named, which models a person is offered, and the errors that say
what to set when a model cannot run here. See agent/llm/factory.py for the scheme."""

from collections.abc import Callable

import pytest

from agent.llm import factory
from agent.llm.factory import ModelChoice, ModelUnavailable
from agent.llm.groq import GroqLLM
from agent.llm.mock import MockLLM
from agent.llm.openai_compat import OpenAICompatibleLLM
from tests.test_settings import load_settings

pytestmark = pytest.mark.fast

OLLAMA = "http://127.0.0.1:11434/v1"
GPT_OSS = "openai/gpt-oss-120b"
QWEN3 = "qwen3:8b"

Configure = Callable[..., None]

SERVER_SETTINGS = (
    "LOOP_MODELS",
    "LOOP_OPENAI_BASE_URL",
    "LOOP_OPENAI_MODEL",
    "LOOP_OPENAI_TIMEOUT",
    "LOOP_OPENAI_MAX_RETRIES",
    "LOOP_OPENAI_REASONING_EFFORT",
)


@pytest.fixture
def configure(settings) -> Configure:
    """Nothing configured (no key, no server, no model), then what the test gives: the test
    environment's own GROQ_API_KEY or LOOP_MODEL must not decide the outcome."""
    blank = {
        "GROQ_API_KEY": "",
        "GROQ_BASE_URL": "",
        "LOOP_MODEL": "",
        "LOOP_MODELS": [],
        "LOOP_GROQ_MODEL": GPT_OSS,
        "LOOP_OPENAI_BASE_URL": "",
        "LOOP_OPENAI_API_KEY": "",
        "LOOP_OPENAI_MODEL": "",
    }

    def set_up(**given: object) -> None:
        for name, value in {**blank, **given}.items():
            setattr(settings, name, value)

    set_up()
    return set_up


@pytest.fixture
def on_ollama(configure) -> Configure:
    """An Ollama server with qwen3:8b, no Groq key."""
    configure(LOOP_OPENAI_BASE_URL=OLLAMA, LOOP_OPENAI_MODEL=QWEN3)
    return configure


@pytest.fixture
def on_both(configure) -> Configure:
    """A Groq key and an Ollama server with qwen3:8b."""
    configure(GROQ_API_KEY="gsk_test", LOOP_OPENAI_BASE_URL=OLLAMA, LOOP_OPENAI_MODEL=QWEN3)
    return configure


# --- parse: what a name means ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("mock", ModelChoice("mock", "mock")),
        ("groq:openai/gpt-oss-20b", ModelChoice("groq", "openai/gpt-oss-20b")),
        ("openai:llama3.1:8b", ModelChoice("openai", "llama3.1:8b")),
        ("openai:openai/gpt-oss-120b", ModelChoice("openai", "openai/gpt-oss-120b")),
        (
            "openai:hf.co/bartowski/Qwen3-8B-GGUF:Q4_K_M",
            ModelChoice("openai", "hf.co/bartowski/Qwen3-8B-GGUF:Q4_K_M"),
        ),
    ],
)
def test_a_prefix_names_the_provider_and_only_the_first_colon_counts(configure, name, meant):
    assert factory.parse(name) == meant


def test_a_qualified_name_means_the_same_whatever_is_configured(configure, on_both):
    assert factory.parse("groq:qwen3:8b") == ModelChoice("groq", "qwen3:8b")
    configure()
    assert factory.parse("openai:qwen3:8b") == ModelChoice("openai", "qwen3:8b")


@pytest.mark.parametrize(
    "choice",
    [
        ModelChoice("mock", "mock"),
        ModelChoice("groq", GPT_OSS),
        ModelChoice("openai", QWEN3),
        ModelChoice("openai", "hf.co/org/model:Q8_0"),
    ],
)
def test_a_choices_name_parses_back_to_it_with_both_providers_configured(on_both, choice):
    assert factory.parse(choice.name) == choice


def test_the_mock_is_named_without_a_prefix():
    assert ModelChoice(MockLLM.provider, MockLLM.model).name == "mock"
    assert ModelChoice("openai", QWEN3).name == "openai:qwen3:8b"


def test_an_ollama_name_with_a_colon_is_not_taken_for_a_provider(on_ollama):
    # `qwen3` and `llama3.1` are no providers: the whole name is the model's.
    assert factory.parse("qwen3:8b") == ModelChoice("openai", "qwen3:8b")
    assert factory.parse("llama3.1:8b") == ModelChoice("openai", "llama3.1:8b")


# --- bare names --------------------------------------------------------------------------------


def test_a_bare_name_runs_on_groq_when_only_groq_is_configured(configure):
    configure(GROQ_API_KEY="gsk_test")
    assert factory.parse(GPT_OSS) == ModelChoice("groq", GPT_OSS)


def test_a_bare_name_runs_on_the_server_when_only_a_server_is_configured(on_ollama):
    assert factory.parse("llama3.1:8b") == ModelChoice("openai", "llama3.1:8b")
    assert factory.resolve("llama3.1:8b") == ModelChoice("openai", "llama3.1:8b")


def test_with_both_configured_the_servers_model_runs_on_the_server_any_other_on_groq(on_both):
    assert factory.parse(QWEN3) == ModelChoice("openai", QWEN3)
    assert factory.parse("openai/gpt-oss-20b") == ModelChoice("groq", "openai/gpt-oss-20b")
    assert factory.parse("llama3.1:8b") == ModelChoice("groq", "llama3.1:8b")


def test_with_nothing_configured_a_bare_name_is_groqs_and_says_it_needs_a_key(configure):
    assert factory.parse(GPT_OSS) == ModelChoice("groq", GPT_OSS)
    with pytest.raises(ModelUnavailable) as refused:
        factory.resolve(GPT_OSS)
    message = str(refused.value)
    assert f"Model {GPT_OSS!r} runs on Groq and needs GROQ_API_KEY" in message
    assert "LOOP_OPENAI_BASE_URL" in message
    assert "'mock'" in message


# --- the default -------------------------------------------------------------------------------


def test_with_nothing_configured_runs_use_the_mock(configure):
    assert factory.default_model() == "mock"
    assert factory.resolve() == ModelChoice("mock", "mock")


def test_with_a_groq_key_runs_use_loop_groq_model(configure):
    configure(GROQ_API_KEY="gsk_test")
    assert factory.resolve() == ModelChoice("groq", GPT_OSS)


def test_with_a_server_and_no_groq_key_runs_use_loop_openai_model_keyless(on_ollama):
    assert factory.default_model() == "openai:qwen3:8b"
    assert factory.resolve() == ModelChoice("openai", QWEN3)
    llm = factory.llm_for()
    assert isinstance(llm, OpenAICompatibleLLM)
    assert (llm.model, llm.base_url) == (QWEN3, OLLAMA + "/")
    assert llm.api_key == "no-key"


def test_with_both_configured_the_groq_key_wins_the_default(on_both):
    assert factory.resolve() == ModelChoice("groq", GPT_OSS)
    assert isinstance(factory.llm_for(), GroqLLM)


def test_with_both_configured_the_default_stays_on_groq_when_the_names_are_the_same(on_both):
    # OpenRouter names gpt-oss as Groq does: a Groq key still makes Groq the default.
    on_both(
        GROQ_API_KEY="gsk_test",
        LOOP_OPENAI_BASE_URL="https://openrouter.ai/api/v1",
        LOOP_OPENAI_MODEL=GPT_OSS,
    )
    assert factory.resolve() == ModelChoice("groq", GPT_OSS)


def test_loop_model_beats_every_other_default(on_both):
    on_both(
        GROQ_API_KEY="gsk_test",
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODEL="openai:llama3.1:8b",
        LOOP_MODELS=["mock"],
    )
    assert factory.resolve() == ModelChoice("openai", "llama3.1:8b")


def test_without_loop_model_the_first_of_loop_models_is_the_default(on_both):
    on_both(
        GROQ_API_KEY="gsk_test",
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODELS=["openai:qwen3:8b", "mock"],
    )
    assert factory.default_model() == "openai:qwen3:8b"
    assert factory.resolve() == ModelChoice("openai", QWEN3)


def test_a_server_without_a_model_says_to_set_loop_openai_model(configure):
    configure(LOOP_OPENAI_BASE_URL=OLLAMA)
    with pytest.raises(ModelUnavailable) as refused:
        factory.resolve()
    assert str(refused.value) == (
        "LOOP_OPENAI_BASE_URL is set but no model is named: set LOOP_OPENAI_MODEL to one the "
        "server has (`manage.py modelcheck` lists them)."
    )


# --- what cannot run here ----------------------------------------------------------------------


def test_a_server_model_without_a_server_says_to_set_loop_openai_base_url(configure):
    configure(GROQ_API_KEY="gsk_test")
    with pytest.raises(ModelUnavailable) as refused:
        factory.resolve("openai:qwen3:8b")
    message = str(refused.value)
    assert message.startswith("Model 'qwen3:8b' runs on an OpenAI-compatible server and needs ")
    assert "LOOP_OPENAI_BASE_URL (for example http://127.0.0.1:11434/v1 for Ollama)" in message


def test_a_groq_model_without_a_key_is_refused_even_with_a_server(on_ollama):
    with pytest.raises(ModelUnavailable, match="runs on Groq and needs GROQ_API_KEY"):
        factory.resolve("groq:openai/gpt-oss-20b")


def test_a_recorded_provider_that_loop_does_not_know_is_refused_naming_the_known_ones(configure):
    with pytest.raises(ModelUnavailable) as refused:
        factory.resolve(ModelChoice("anthropic", "claude"))
    assert str(refused.value) == (
        "Model 'claude' runs on 'anthropic', which this Loop does not know (it knows mock, groq, "
        "openai)."
    )


def test_an_unknown_prefix_is_part_of_a_bare_name(on_ollama):
    # `anthropic:claude` is not a provider and a model: on a server, it is a model's name.
    assert factory.parse("anthropic:claude") == ModelChoice("openai", "anthropic:claude")


def test_a_prefix_with_no_model_after_it_is_refused_saying_what_to_set(on_both):
    with pytest.raises(ModelUnavailable, match="No Groq model is named"):
        factory.resolve("groq:")
    with pytest.raises(ModelUnavailable, match="set LOOP_OPENAI_MODEL"):
        factory.resolve("openai:")


def test_the_client_for_a_name_is_the_providers(on_both, settings):
    settings.LOOP_OPENAI_API_KEY = "sk-local"
    assert isinstance(factory.llm_for("mock"), MockLLM)
    groq = factory.llm_for("groq:openai/gpt-oss-20b")
    assert isinstance(groq, GroqLLM)
    assert groq.model == "openai/gpt-oss-20b"
    served = factory.llm_for("openai:llama3.1:8b")
    assert isinstance(served, OpenAICompatibleLLM)
    assert (served.model, served.api_key) == ("llama3.1:8b", "sk-local")


# --- offered models ----------------------------------------------------------------------------


def test_with_no_loop_models_the_default_alone_is_offered(on_ollama):
    assert factory.offered_models() == [ModelChoice("openai", QWEN3)]


def test_with_nothing_that_can_run_nothing_is_offered(configure):
    configure(LOOP_MODEL="groq:openai/gpt-oss-20b")
    assert factory.offered_models() == []


def test_loop_models_that_cannot_run_here_are_left_out_in_order(on_ollama):
    on_ollama(
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODELS=["openai:llama3.1:8b", "groq:openai/gpt-oss-20b", "mock", "qwen3:8b"],
    )
    assert factory.offered_models() == [
        ModelChoice("openai", "llama3.1:8b"),
        ModelChoice("mock", "mock"),
        ModelChoice("openai", QWEN3),
    ]


def test_two_names_for_one_model_are_offered_once(on_ollama):
    on_ollama(
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODELS=["qwen3:8b", "openai:qwen3:8b", "mock", "mock"],
    )
    assert factory.offered_models() == [ModelChoice("openai", QWEN3), ModelChoice("mock", "mock")]


def test_with_both_configured_each_provider_is_offered_by_its_qualified_name(on_both):
    on_both(
        GROQ_API_KEY="gsk_test",
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODELS=["groq:openai/gpt-oss-120b", "openai:qwen3:8b", "mock"],
    )
    offered = factory.offered_models()
    assert [choice.name for choice in offered] == [
        "groq:openai/gpt-oss-120b",
        "openai:qwen3:8b",
        "mock",
    ]
    assert [factory.resolve(choice.name) for choice in offered] == offered


def test_the_default_is_offered_first_when_loop_model_names_another_of_loop_models(on_ollama):
    on_ollama(
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODEL="mock",
        LOOP_MODELS=["openai:qwen3:8b", "mock"],
    )
    assert factory.resolve() == ModelChoice("mock", "mock")
    assert factory.offered_models()[0] == ModelChoice("mock", "mock")


# --- from the environment ----------------------------------------------------------------------


def test_loop_models_is_a_comma_list_whose_names_keep_their_colons(monkeypatch, tmp_path):
    loaded = load_settings(
        monkeypatch, tmp_path, LOOP_MODELS=" openai:qwen3:8b , mock,,groq:openai/gpt-oss-20b "
    )
    assert loaded["LOOP_MODELS"] == ["openai:qwen3:8b", "mock", "groq:openai/gpt-oss-20b"]


def test_unset_loop_models_is_empty_and_the_servers_settings_default_off(monkeypatch, tmp_path):
    for name in SERVER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    loaded = load_settings(monkeypatch, tmp_path)
    assert loaded["LOOP_MODELS"] == []
    assert (loaded["LOOP_OPENAI_BASE_URL"], loaded["LOOP_OPENAI_MODEL"]) == ("", "")
    assert (loaded["LOOP_OPENAI_TIMEOUT"], loaded["LOOP_OPENAI_MAX_RETRIES"]) == (120, 2)
    assert loaded["LOOP_OPENAI_REASONING_EFFORT"] == ""


def test_the_default_is_offered_first_even_when_loop_models_leaves_it_out(on_ollama):
    # A new conversation runs on the default: the pick must hold it, or the chat would show a
    # model a person cannot pick again.
    on_ollama(
        LOOP_OPENAI_BASE_URL=OLLAMA,
        LOOP_OPENAI_MODEL=QWEN3,
        LOOP_MODEL="mock",
        LOOP_MODELS=["openai:qwen3:8b"],
    )
    assert factory.offered_models() == [ModelChoice("mock", "mock"), ModelChoice("openai", QWEN3)]


def test_a_default_that_cannot_run_here_is_left_out_and_the_others_still_offered(configure):
    configure(LOOP_MODEL="groq:openai/gpt-oss-20b", LOOP_MODELS=["mock"])
    assert factory.offered_models() == [ModelChoice("mock", "mock")]
