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


def test_a_process_loads_the_openai_sdk_only_to_build_a_client_for_it():
    """Every worker, web process and runagent reads model names; only one that asks an
    OpenAI-compatible server pays for importing its SDK."""
    script = (
        "import sys, django; django.setup()\n"
        "import engine.execution, chat.urls, agent.llm.factory as factory\n"
        "print('before', 'openai' in sys.modules)\n"
        "factory.llm_for(factory.ModelChoice(factory.OPENAI, 'm'))\n"
        "from agent.llm.openai_compat import OpenAICompatibleLLM\n"
        "print('after', 'openai' in sys.modules, OpenAICompatibleLLM.provider == factory.OPENAI)\n"
    )
    env = child_environment(LOOP_OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["before", "False", "after", "True", "True"]
