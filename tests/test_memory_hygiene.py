"""What is worth remembering: one named rule, and the runs it keeps out of memory; and the memory
a run leaves, read back by its own reader."""

import pytest

from agent.llm.scripted import ScriptedLLM, call
from agent.models import AgentRun
from agent.runs import default_limits, start_run
from core.ending import progress_report
from core.events import AnswerSource, RunStatus
from core.llm import ToolCall, Usage
from core.results import ToolResult, ToolStatus
from engine.execution import execute_run
from memory.hygiene import (
    LEAVES_SOMETHING,
    REMEMBERS,
    carries_nothing,
    outcome_answer,
    outcome_text,
    worth_an_outcome,
)
from memory.models import Memory, Origin
from memory.tools import REMEMBER
from tools.files import WRITE_FILE
from tools.search import WEB_SEARCH


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   \n",
        "I could not compute 1 / 0: ZeroDivisionError: division by zero",
        "I can't help with that.",
        "I can\u2019t reach that site.",
        "Sorry, I don't have access to your calendar.",
        "I'm unable to open that file.",
        "I have no memory of an earlier run about that.",
    ],
)
def test_help_and_refusals_carry_nothing(answer):
    assert carries_nothing(answer)


MOCKS_HELP = "This site runs a demo model, which can only do a few kinds of task."


def test_the_models_help_carries_nothing_by_its_mark_not_its_words():
    """The mock's help is known by the mark its reply carries (the run's answer source)."""
    assert carries_nothing(MOCKS_HELP, source=AnswerSource.HELP)
    assert carries_nothing("The sum of 1..100 is 5050.", source=AnswerSource.HELP)
    assert carries_nothing(MOCKS_HELP, source=AnswerSource.HELP, ok_tool_calls=2)


def loops_account(*results: ToolResult) -> str:
    """What Loop answers for a run that ended without the model's own account."""
    calls = [ToolCall(f"c{n}", "read_file", "{}") for n in range(len(results))]
    return progress_report("let me", list(zip(calls, results, strict=True)))


def test_loops_account_of_a_run_is_judged_by_the_calls_that_worked():
    failed = ToolResult(ToolStatus.ERROR, "missing.txt does not exist", 0.0)
    worked = ToolResult(ToolStatus.OK, "the notes", 0.0)
    progress = AnswerSource.PROGRESS
    assert carries_nothing(loops_account(failed), source=progress, ok_tool_calls=0)
    assert carries_nothing(loops_account(), source=progress, ok_tool_calls=0)
    assert not carries_nothing(loops_account(failed, worked), source=progress, ok_tool_calls=1)


def test_the_rule_reads_whose_answer_it_is_not_how_it_is_worded():
    """A model's answer worded like Loop's account is still the model's."""
    assert not carries_nothing(loops_account(ToolResult(ToolStatus.ERROR, "gone", 0.0)))


@pytest.mark.parametrize(
    "answer",
    [
        "The sum of 1..100 is 5050. I saved it to sum.txt.",
        "17 * 23 = 391.",
        "Sorrow is the theme of chapter 3.",
        "Note: the deploy key is in vault/deploy.",
    ],
)
def test_results_are_worth_keeping(answer):
    assert not carries_nothing(answer)


@pytest.mark.django_db
def test_the_mocks_help_text_is_not_remembered_but_a_result_is(alice, workspaces):
    helped = execute_run(start_run(alice, "Tell me a joke about penguins"))
    assert helped.status == RunStatus.SUCCEEDED
    assert helped.answer.startswith("This site runs a demo model")
    finished = helped.events.get(kind="run_finished").data
    assert finished["answer_source"] == AnswerSource.HELP
    saved = execute_run(start_run(alice, "Compute the sum of 1..100 and save it to a file"))
    assert list(Memory.objects.values_list("source_run_id", flat=True)) == [saved.pk]


@pytest.mark.django_db
def test_a_run_halted_with_nothing_done_is_not_remembered(alice, workspaces):
    failing = [call("read_file", {"path": f"missing-{n}.txt"}) for n in range(3)]
    run = start_run(alice, "Read my notes", limits=default_limits())
    halted = execute_run(run, llm=ScriptedLLM(failing))  # no summary turn left: the progress note
    assert (halted.status, halted.halt_reason) == (RunStatus.HALTED, "tool_failures")
    assert halted.answer.startswith("Stopped before a final answer.")
    assert not Memory.objects.exists()


@pytest.mark.django_db
def test_a_halted_run_whose_account_has_a_call_that_worked_is_remembered(alice, workspaces):
    spent = Usage(prompt_tokens=200, completion_tokens=0)
    wrote = call("write_file", {"path": "notes.txt", "content": "buy milk"})
    script = [wrote, call("list_files", {}, usage=spent)]
    run = start_run(alice, "Save my notes", limits=default_limits(max_tokens=100))
    halted = execute_run(run, llm=ScriptedLLM(script))  # the token budget: no summary turn
    assert (halted.status, halted.halt_reason) == (RunStatus.HALTED, "token_budget")
    assert halted.answer.startswith("Stopped before a final answer.")
    [memory] = Memory.objects.all()
    assert outcome_answer(memory.text) == halted.answer


@pytest.mark.parametrize(
    "answer", ["17 * 23 = 391", "I had to stop: the cap.\n1. run_code ok: 5050", ""]
)
@pytest.mark.parametrize("files", [[], ["sum.txt (5050)"]])
def test_an_outcome_memory_gives_its_answer_back(answer, files):
    text = outcome_text(
        "What is 17 * 23?\nAnswer: this line is the task's", "succeeded", answer, files
    )
    assert outcome_answer(text) == answer


def test_a_memory_that_is_no_outcome_has_no_answer():
    assert outcome_answer("my favourite colour is teal") is None


def test_an_outcome_is_worth_a_memory_only_for_a_file_written_or_a_web_search():
    assert worth_an_outcome({"run_code", "read_file", "write_file"})
    assert worth_an_outcome({"web_search"})
    for nothing_left in [set(), {"run_code"}, {"read_file", "run_code"}, {"list_files"}]:
        assert not worth_an_outcome(nothing_left)
    # A run that stored a fact on purpose has its memory: no outcome beside it.
    assert not worth_an_outcome({"remember"})
    assert not worth_an_outcome({"remember", "write_file"})
    # The rule names tools as runs record them.
    assert {WRITE_FILE.name, WEB_SEARCH.name} == LEAVES_SOMETHING
    assert REMEMBER.name == REMEMBERS


@pytest.mark.django_db(transaction=True)  # `remember` works in a thread of its own
def test_arithmetic_counting_reading_and_remembering_runs_store_no_outcome(alice, workspaces):
    """Issue 28: after twelve runs a person had nine memories, one or two about her. Runs that
    computed, counted, read a file or answered from what was recalled leave none; a run that
    called `remember` leaves its fact only; the demo, which writes a file, leaves its outcome."""
    for task in (
        "What is 17 * 23?",
        "Add 3, 4 and 5",
        "Count slowly to 2",
        "Save 'buy milk' to notes.txt",  # writes a file: kept
        "Read notes.txt",
        "Remember that my favourite city is Lisbon",
        "What is my favourite city?",  # answered from the fact recalled
        "Compute the sum of 1..100 and save it to a file",  # writes a file: kept
    ):
        run = execute_run(start_run(alice, task))
        assert run.status == RunStatus.SUCCEEDED, (task, run.answer)
    kept = Memory.objects.filter(owner=alice)
    told = kept.filter(origin=Origin.TOLD)
    assert [memory.text for memory in told] == ["my favourite city is Lisbon"]
    outcomes = sorted(
        AgentRun.objects.get(pk=memory.source_run_id).task
        for memory in kept.filter(origin=Origin.RUN)
    )
    assert outcomes == [
        "Compute the sum of 1..100 and save it to a file",
        "Save 'buy milk' to notes.txt",
    ]
    assert all("Files written:" in memory.text for memory in kept.filter(origin=Origin.RUN))
