"""What is worth remembering: one named rule, and the runs it keeps out of memory."""

import pytest

from agent.events import RunStatus
from agent.execution import execute_run
from agent.llm.scripted import ScriptedLLM, call
from agent.runs import default_limits, start_run
from memory.hygiene import carries_nothing
from memory.models import Memory


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   \n",
        "I am Loop's mock model (no GROQ_API_KEY is set), so I can only work a few task shapes.",
        "I could not compute 1 / 0: ZeroDivisionError: division by zero",
        "I can't help with that.",
        "I can\u2019t reach that site.",
        "Sorry, I don't have access to your calendar.",
        "I'm unable to open that file.",
        "I have no memory of an earlier run about that.",
        "Stopped before a final answer.\n1. read_file -> error: missing.txt does not exist",
        "Stopped before a final answer. The model last said: let me\n1. run_code -> timeout: ...",
    ],
)
def test_help_refusals_and_runs_that_did_nothing_carry_nothing(answer):
    assert carries_nothing(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "The sum of 1..100 is 5050. I saved it to sum.txt.",
        "17 * 23 = 391.",
        "Sorrow is the theme of chapter 3.",
        "Note: the deploy key is in vault/deploy.",
        "Stopped before a final answer.\n1. run_code -> ok: exit status: 0 --- stdout --- 42",
    ],
)
def test_results_are_worth_keeping(answer):
    assert not carries_nothing(answer)


@pytest.mark.django_db
def test_the_mocks_help_text_is_not_remembered_but_a_result_is(alice, workspaces):
    helped = execute_run(start_run(alice, "Tell me a joke about penguins"))
    assert helped.status == RunStatus.SUCCEEDED
    assert helped.answer.startswith("I am Loop's mock model")
    computed = execute_run(start_run(alice, "What is 17 * 23?"))
    assert list(Memory.objects.values_list("source_run", flat=True)) == [computed.pk]


@pytest.mark.django_db
def test_a_run_halted_with_nothing_done_is_not_remembered(alice, workspaces):
    failing = [call("read_file", {"path": f"missing-{n}.txt"}) for n in range(3)]
    run = start_run(alice, "Read my notes", limits=default_limits())
    halted = execute_run(run, llm=ScriptedLLM(failing))  # no summary turn left: the progress note
    assert (halted.status, halted.halt_reason) == (RunStatus.HALTED, "tool_failures")
    assert halted.answer.startswith("Stopped before a final answer.")
    assert not Memory.objects.exists()
