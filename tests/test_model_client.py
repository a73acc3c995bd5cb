"""A run's model client is built once, by the worker that works the run: queueing a run only
resolves which provider and model it will use (no client, no key handed around in a request)."""

import subprocess
import sys

import pytest

from agent.llm import factory
from agent.llm.factory import ModelUnavailable
from agent.llm.mock import MockLLM
from agent.runs import start_run
from engine.execution import execute_run
from tests.conftest import child_environment

pytestmark = pytest.mark.django_db


class NoClient:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a client was built to queue a run")


def test_queueing_a_groq_run_builds_no_client(alice, settings, monkeypatch):
    settings.GROQ_API_KEY = "gsk_test"
    monkeypatch.setattr(factory.GroqLLM, "__init__", NoClient.__init__)
    run = start_run(alice, "What is 17 * 23?", model="openai/gpt-oss-20b")
    assert (run.provider, run.model) == ("groq", "openai/gpt-oss-20b")


def test_a_model_that_cannot_run_here_is_refused_before_anything_is_stored(alice, settings):
    settings.GROQ_API_KEY = ""
    with pytest.raises(ModelUnavailable, match="needs GROQ_API_KEY"):
        start_run(alice, "What is 17 * 23?", model="openai/gpt-oss-20b")
    assert not alice.runs.exists()


def test_the_worker_builds_one_client_per_run_streaming_to_the_run(alice, workspaces, monkeypatch):
    built: list[MockLLM] = []

    class CountedMock(MockLLM):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(factory, "MockLLM", CountedMock)
    run = start_run(alice, "Compute the sum of 1..100 and save it to a file", model="mock")
    assert built == []
    done = execute_run(run)
    assert done.status == "succeeded"
    [client] = built
    assert client.deltas is not None  # built with the run's stream, not patched in later


def test_a_process_never_loads_a_vendor_sdk_not_even_to_build_a_client():
    """Every worker, web process and runagent reads model names, and one that asks a model
    server builds its client: plain httpx2, no vendor SDK (the openai SDK alone took a third of a
    second to import)."""
    script = (
        "import sys, django; django.setup()\n"
        "import engine.execution, chat.urls, agent.llm.factory as factory\n"
        "sdks = lambda: any(name in sys.modules for name in ('openai', 'groq'))\n"
        "print('before', sdks())\n"
        "factory.llm_for(factory.ModelChoice(factory.OPENAI, 'm'))\n"
        "factory.llm_for(factory.ModelChoice(factory.GROQ, 'm'))\n"
        "from agent.llm.openai_compat import OpenAICompatibleLLM\n"
        "print('after', sdks(), OpenAICompatibleLLM.provider == factory.OPENAI)\n"
    )
    env = child_environment(LOOP_OPENAI_BASE_URL="http://127.0.0.1:9/v1", GROQ_API_KEY="gsk_k")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["before", "False", "after", "False", "True"]
