"""MockLLM alone: driven turn by turn with tool results chosen by the test (no DB, no sandbox).

Every message it reads is written by the function the loop writes it with (a tool result, run_code's
report, Loop's notes, the summary request, the memory section, a run's outcome memory), so a
reworded format changes what these tests feed the mock too.
"""

import json
import posixpath
import subprocess
import sys
import threading
from dataclasses import replace
from typing import Any

import pytest

from agent.llm import mock
from agent.llm.factory import llm_for
from agent.llm.mock import MockLLM
from core.history import (
    INTERRUPTED_CALL,
    assistant_message,
    loop_note,
    memory_section,
    summary_prompt,
    tool_message,
)
from core.interrupt import Interrupt, Interrupted, StopReason
from core.llm import Message, ModelTimedOut, Reply, ToolCall
from core.results import ToolStatus
from memory.hygiene import outcome_text
from sandbox.snippet import Execution
from tools.code import STOPPED, describe, parse_report
from tools.files import empty_file_note

pytestmark = pytest.mark.fast

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in ("run_code", "read_file", "write_file", "list_files", "web_search")
]

SYSTEM = "You are Loop, an agent that completes the user's task by calling tools."
DEMO = "Compute the sum of 1..100 and save it to a file"
CAP = "it reached its cap of 10 iterations."
STOPPING = summary_prompt(CAP)


def read(status: ToolStatus, text: str) -> str:
    """A tool result as the model reads it."""
    return tool_message("call", status, text)["content"]


def not_found(path: str) -> str:
    """read_file's error for a file that is not there."""
    return f"{path} does not exist in your workspace. Use list_files to see what is there."


def flat(text: str) -> str:
    return " ".join(text.split())


TASKS = [
    DEMO,
    "Compute the sum of 1..100 and save it to total.txt",
    "What is 17 * 23?",
    "Compute (2 + 3) ^ 4",
    "Sum of 1..10",
    "Add 3, 4 and 5",
    "Save 'buy milk' to notes.txt",
    "Read notes.txt",
    "What's in notes.txt?",
    "List my files",
    "Search the web for pgvector HNSW",
    "Keep reading missing.txt until it exists",
    "How many lines are in data.csv?",
    "How many words are in notes.txt?",
]


def report(exit_status: int | None, stdout: str = "", stderr: str = "") -> str:
    """run_code's report of a program."""
    return describe(
        Execution(
            exit_status=exit_status,
            stdout=stdout,
            stderr=stderr,
            timed_out=exit_status is None,
            output_truncated=False,
            policy="subprocess",
        )
    )


def ran(stdout: str) -> str:
    """run_code's report of a program that exited cleanly."""
    return report(0, stdout + "\n")


def printed_by(code: str) -> str:
    """What the planned program prints when run by a plain interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


class Run:
    """A conversation with MockLLM in which the test plays the tools."""

    def __init__(self, task: str, *, system: str = SYSTEM) -> None:
        self.messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task},
        ]
        self.calls: list[ToolCall] = []
        self.reply = self._ask(TOOLS)

    def _ask(self, tools: list[dict[str, Any]] | None) -> Reply:
        self.reply = MockLLM().chat(self.messages, tools)
        self.calls.extend(self.reply.tool_calls)
        return self.reply

    @property
    def call(self) -> ToolCall:
        """The one tool call the model just planned."""
        assert self.reply.text == ""
        assert len(self.reply.tool_calls) == 1, self.reply
        return self.reply.tool_calls[0]

    @property
    def arguments(self) -> dict[str, Any]:
        return json.loads(self.call.arguments)

    @property
    def answer(self) -> str:
        """The final answer the model just gave, with no tool call."""
        assert self.reply.tool_calls == (), self.reply
        assert self.reply.text
        return self.reply.text

    def result(self, text: str, status: ToolStatus = ToolStatus.OK) -> Reply:
        """Answer the planned call with its result and let the model take its next turn."""
        call = self.call
        self.messages.append(assistant_message("", [call]))
        self.messages.append(tool_message(call.id, status, text))
        return self._ask(TOOLS)

    def failed(self, status: ToolStatus, text: str) -> Reply:
        return self.result(text, status)

    def stop(self, request: str = STOPPING) -> Reply:
        """The summarising last turn of a halted run."""
        if self.reply.tool_calls:
            self.messages.append(assistant_message(self.reply.text, self.reply.tool_calls))
            for call in self.reply.tool_calls:
                self.messages.append(tool_message(call.id, ToolStatus.SKIPPED, "halted"))
        self.messages.append({"role": "user", "content": request})
        return self._ask(None)


# the demo -----------------------------------------------------------------------------------------


def test_demo_computes_checks_the_file_writes_it_when_missing_and_answers() -> None:
    run = Run(DEMO)
    assert run.call.name == "run_code"
    assert printed_by(run.arguments["code"]) == "5050"

    run.result(ran("5050"))
    assert run.call.name == "read_file"
    assert run.arguments == {"path": "sum.txt"}

    run.failed(ToolStatus.ERROR, not_found("sum.txt"))
    assert run.call.name == "write_file"
    assert run.arguments == {"path": "sum.txt", "content": "5050\n"}

    run.result("Wrote 5 bytes to sum.txt.")
    assert "5050" in run.answer
    assert "sum.txt" in run.answer


def test_demo_uses_the_file_the_task_names() -> None:
    run = Run("Compute the sum of 1..100 and save it to total.txt")
    run.result(ran("5050"))
    assert run.arguments == {"path": "total.txt"}
    run.failed(ToolStatus.ERROR, not_found("total.txt"))
    assert run.arguments == {"path": "total.txt", "content": "5050\n"}
    run.result("Wrote 5 bytes to total.txt.")
    assert "total.txt" in run.answer
    assert "sum.txt" not in run.answer


def test_demo_answers_without_writing_when_the_file_already_holds_the_sum() -> None:
    run = Run(DEMO)
    run.result(ran("5050"))
    run.result("5050\n")
    assert "5050" in run.answer
    assert "sum.txt" in run.answer
    assert [call.name for call in run.calls] == ["run_code", "read_file"]


def test_demo_overwrites_a_file_that_holds_something_else() -> None:
    run = Run(DEMO)
    run.result(ran("5050"))
    run.result("42\n")
    assert run.call.name == "write_file"
    assert run.arguments == {"path": "sum.txt", "content": "5050\n"}


def test_demo_reports_a_failed_computation_instead_of_saving() -> None:
    run = Run(DEMO)
    run.failed(ToolStatus.TIMEOUT, "Killed after 10 seconds (timeout).")
    assert "could not" in run.answer.lower()
    assert "Killed after 10 seconds" in run.answer
    assert [call.name for call in run.calls] == ["run_code"]


def test_demo_reports_a_failed_write_instead_of_claiming_it_saved() -> None:
    run = Run(DEMO)
    run.result(ran("5050"))
    run.failed(ToolStatus.ERROR, not_found("sum.txt"))
    run.failed(ToolStatus.DENIED, "sum.txt is outside your workspace.")
    assert "failed" in run.answer
    assert read(ToolStatus.DENIED, "sum.txt is outside your workspace.") in run.answer
    assert "I saved it" not in run.answer


# arithmetic ---------------------------------------------------------------------------------------

ARITHMETIC = [
    ("What is 17 * 23?", "391"),
    ("Compute (2 + 3) ^ 4", "625"),
    ("Sum of 1..10", "55"),
    ("Add 3, 4 and 5", "12"),
]


@pytest.mark.parametrize(("task", "value"), ARITHMETIC)
def test_arithmetic_is_computed_with_run_code_and_answered_from_its_stdout(
    task: str, value: str
) -> None:
    run = Run(task)
    assert run.call.name == "run_code"
    assert printed_by(run.arguments["code"]) == value
    run.result(ran(value))
    assert value in run.answer


def test_a_caret_means_a_power_in_the_planned_code() -> None:
    code = Run("Compute (2 + 3) ^ 4").arguments["code"]
    assert "**" in code
    assert "^" not in code


@pytest.mark.parametrize(("task", "value"), ARITHMETIC)
def test_a_failed_run_code_is_reported_honestly(task: str, value: str) -> None:
    run = Run(task)
    run.failed(ToolStatus.ERROR, report(1, stderr="MemoryError: boom\n"))
    assert "could not" in run.answer.lower()
    assert "MemoryError: boom" in run.answer
    assert value not in run.answer


# one-call tasks -----------------------------------------------------------------------------------

ONE_CALL = [
    (
        "Save 'buy milk' to notes.txt",
        "write_file",
        {"path": "notes.txt", "content": "buy milk"},
        "Wrote 8 bytes to notes.txt.",
    ),
    ("Read notes.txt", "read_file", {"path": "notes.txt"}, "buy milk"),
    ("What's in notes.txt?", "read_file", {"path": "notes.txt"}, "buy milk"),
    ("List my files", "list_files", {}, "notes.txt (8 bytes)"),
    (
        "Search the web for pgvector HNSW",
        "web_search",
        {"query": "pgvector HNSW"},
        "1. pgvector: HNSW indexes https://github.com/pgvector/pgvector",
    ),
]


@pytest.mark.parametrize(("task", "tool", "arguments", "result"), ONE_CALL)
def test_one_call_task_plans_its_tool_and_answers_with_the_result(
    task: str, tool: str, arguments: dict[str, Any], result: str
) -> None:
    run = Run(task)
    assert run.call.name == tool
    assert run.arguments == arguments
    run.result(result)
    assert result in run.answer
    assert len(run.calls) == 1


@pytest.mark.parametrize(("task", "tool", "arguments", "result"), ONE_CALL)
def test_one_call_task_reports_a_failed_tool_honestly(
    task: str, tool: str, arguments: dict[str, Any], result: str
) -> None:
    run = Run(task)
    run.failed(ToolStatus.ERROR, "something broke.")
    assert f"{tool} failed" in run.answer
    assert read(ToolStatus.ERROR, "something broke.") in run.answer
    assert result not in run.answer


# counting a file's lines and words ---------------------------------------------------------------

DATA_CSV = "name,count\nalpha,1\nbeta,2\ngamma,3 and more words here\n"


@pytest.mark.parametrize(
    ("task", "path"),
    [
        ("How many lines are in data.csv?", "data.csv"),
        ("How many words are in notes.txt?", "notes.txt"),
        ("how many lines of text are in the file reports/q1.md", "reports/q1.md"),
        ("Count the words in data.csv", "data.csv"),
    ],
)
def test_counting_reads_the_named_file_first(task: str, path: str) -> None:
    run = Run(task)
    assert run.call.name == "read_file"
    assert run.arguments == {"path": path}


def test_counting_answers_with_the_files_lines_and_words() -> None:
    run = Run("How many lines are in data.csv?")
    run.result(DATA_CSV)
    assert run.answer == "data.csv has 4 lines and 8 words."
    assert [call.name for call in run.calls] == ["read_file"]


@pytest.mark.parametrize(
    ("content", "answer"),
    [
        ("one line, no newline", "notes.txt has 1 line and 4 words."),
        ("two\nlines", "notes.txt has 2 lines and 2 words."),
        ("a\n\n\nb\n", "notes.txt has 4 lines and 2 words."),
    ],
)
def test_counting_counts_a_last_line_without_a_newline_and_blank_lines(
    content: str, answer: str
) -> None:
    run = Run("How many words are in notes.txt?")
    run.result(content)
    assert run.answer == answer


def test_counting_an_empty_file_counts_nothing_not_read_files_note() -> None:
    run = Run("How many lines are in empty.txt?")
    run.result(empty_file_note("empty.txt"))
    assert run.answer == "empty.txt has 0 lines and 0 words."


def test_counting_answers_a_failed_read_with_its_error() -> None:
    run = Run("How many lines are in data.csv?")
    run.failed(ToolStatus.ERROR, not_found("data.csv"))
    assert (
        run.answer == f"I could not read data.csv: {read(ToolStatus.ERROR, not_found('data.csv'))}"
    )
    assert "lines" not in run.answer


def test_reading_a_file_still_shows_it_rather_than_counting() -> None:
    """ "Read data.csv" still shows the file; only a question about its lines or words counts."""
    run = Run("Read data.csv")
    run.result(DATA_CSV)
    assert run.answer == DATA_CSV


# a task that keeps failing ------------------------------------------------------------------------


def test_keep_reading_retries_with_new_arguments_for_the_same_file_until_it_exists() -> None:
    run = Run("Keep reading missing.txt until it exists")
    raw_arguments = []
    for _ in range(6):
        assert run.call.name == "read_file"
        raw_arguments.append(run.call.arguments)
        run.failed(ToolStatus.ERROR, not_found("missing.txt"))

    assert len(set(raw_arguments)) == 6
    paths = {posixpath.normpath(json.loads(raw)["path"]) for raw in raw_arguments}
    assert paths == {"missing.txt"}

    assert run.call.name == "read_file"
    run.result("it is here now")
    assert "missing.txt" in run.answer
    assert "it is here now" in run.answer


# tasks it cannot do -------------------------------------------------------------------------------


def test_an_unknown_task_gets_an_honest_mock_answer_without_a_tool_call() -> None:
    """It says plainly that it is a demo model and how to put a task it can do; no setting a
    person cannot change (the console tells operators how to set a model)."""
    run = Run("Write a poem")
    assert "demo model" in run.answer
    assert 'Put your task like one of these:\n- arithmetic: "What is 17 * 23?"' in run.answer
    assert "GROQ_API_KEY" not in run.answer
    assert run.calls == []


def test_the_mocks_help_is_marked_as_help_and_nothing_else_is() -> None:
    """Whoever keeps a run's outcome reads the mark, never the help's words."""
    assert Run("Write a poem").reply.help
    computed = Run("What is 17 * 23?")
    assert not computed.reply.help
    computed.result(ran("391"))
    assert not computed.reply.help
    assert not Run("What did I compute before?").reply.help  # a memory's answer, or none


def test_the_mocks_help_streams_as_its_answer_would() -> None:
    pieces: list[str] = []
    messages: list[Message] = [{"role": "user", "content": "Write a poem"}]
    reply = MockLLM(deltas=pieces.append).chat(messages, TOOLS)
    assert "".join(pieces) == reply.text
    assert reply.text.startswith("This site runs a demo model")


# the summarising last turn ------------------------------------------------------------------------


@pytest.mark.parametrize("task", [*TASKS, "Write a poem"])
@pytest.mark.parametrize("turns", [0, 1, 3])
def test_the_summary_turn_never_calls_a_tool(task: str, turns: int) -> None:
    run = Run(task)
    for _ in range(turns):
        if not run.reply.tool_calls:
            break
        run.failed(ToolStatus.ERROR, not_found("missing.txt"))
    reply = run.stop()
    assert reply.tool_calls == ()
    assert reply.text


def test_the_summary_lists_each_tool_call_made_with_its_outcome() -> None:
    run = Run(DEMO)
    run.result(ran("5050"))
    run.failed(ToolStatus.ERROR, not_found("sum.txt"))
    text = run.stop().text
    assert CAP in text
    # In words, what worked and what failed and why: no tool's output (the cards keep those).
    assert "What worked: run_code." in text
    assert f"What failed: read_file — {not_found('sum.txt')}" in text
    assert "Not finished: write_file (the run ended first)." in text
    assert "--- stdout ---" not in text


def test_the_summary_of_a_run_with_no_tool_calls_still_says_why_it_stopped() -> None:
    run = Run("Write a poem")
    text = run.stop().text
    assert text == f"I had to stop: {CAP}"


# determinism, usage and ids -----------------------------------------------------------------------


@pytest.mark.parametrize("task", [*TASKS, "Write a poem"])
def test_the_same_messages_give_an_identical_reply(task: str) -> None:
    run = Run(task)
    for _ in range(2):
        if run.reply.tool_calls:
            run.failed(ToolStatus.ERROR, not_found("missing.txt"))
    again = [json.loads(json.dumps(message)) for message in run.messages]
    assert MockLLM().chat(again, TOOLS) == run.reply
    assert MockLLM().chat(again, TOOLS) == MockLLM().chat(again, TOOLS)
    assert MockLLM().chat(again, None) == MockLLM().chat(again, None)


@pytest.mark.parametrize("task", [*TASKS, "Write a poem"])
def test_token_usage_is_positive(task: str) -> None:
    run = Run(task)
    assert run.reply.usage.prompt_tokens > 0
    assert run.reply.usage.completion_tokens > 0
    if run.reply.tool_calls:
        run.result(ran("1"))
        assert run.reply.usage.prompt_tokens > 0
        assert run.reply.usage.completion_tokens > 0


DEMO_RESULTS = [
    (ran("5050"), ToolStatus.OK),
    (not_found("sum.txt"), ToolStatus.ERROR),
    ("Wrote 5 bytes to sum.txt.", ToolStatus.OK),
]


def test_prompt_tokens_grow_with_the_prompt() -> None:
    short = Run("Read notes.txt").reply.usage.prompt_tokens
    long = Run("Read notes.txt " + "please " * 50).reply.usage.prompt_tokens
    assert long > short

    run = Run(DEMO)
    seen = [run.reply.usage.prompt_tokens]
    for result in DEMO_RESULTS:
        run.result(*result)
        seen.append(run.reply.usage.prompt_tokens)
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)


def test_prompt_tokens_count_the_tool_specs() -> None:
    messages: list[Message] = [{"role": "user", "content": "Read notes.txt"}]
    with_tools = MockLLM().chat(messages, TOOLS).usage.prompt_tokens
    without_tools = MockLLM().chat(messages, None).usage.prompt_tokens
    assert with_tools > without_tools


@pytest.mark.parametrize(
    ("task", "results"),
    [
        (DEMO, DEMO_RESULTS),
        (
            "Keep reading missing.txt until it exists",
            [(not_found("missing.txt"), ToolStatus.ERROR)] * 8,
        ),
    ],
)
def test_tool_call_ids_are_unique_within_a_run(
    task: str, results: list[tuple[str, ToolStatus]]
) -> None:
    run = Run(task)
    for result in results:
        run.result(*result)
    ids = [call.id for call in run.calls]
    assert len(ids) == len(results) + (1 if run.reply.tool_calls else 0)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    ("task", "tool", "arguments"),
    [
        ("What is -3 + 5?", "run_code", {"code": "print(-3 + 5)"}),
        ("Search the web for how to read config.yaml", "web_search", None),
        ("Save the sum of 1..100 to total.txt", "run_code", None),
    ],
)
def test_tasks_worded_other_ways_get_the_right_first_call(task, tool, arguments):
    [first] = Run(task).reply.tool_calls
    assert first.name == tool
    if arguments is not None:
        assert json.loads(first.arguments) == arguments


def test_the_demo_is_recognised_with_the_saving_named_first():
    run = Run("Save the sum of 1..100 to total.txt")
    run.result(ran("5050"))
    assert json.loads(run.reply.tool_calls[0].arguments) == {"path": "total.txt"}


def test_the_mock_streams_its_answer_in_pieces_that_make_the_whole():
    pieces: list[str] = []
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "List my files"}]
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "notes.txt (12 bytes)"},
    ]
    reply = MockLLM(deltas=pieces.append).chat(messages, TOOLS)
    assert len(pieces) > 1
    assert "".join(pieces) == reply.text == "notes.txt (12 bytes)"


LIST_FILES_TASK = [{"role": "system", "content": "s"}, {"role": "user", "content": "List my files"}]


def test_the_mock_takes_its_latency_on_every_turn(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(mock.time, "sleep", slept.append)
    llm = MockLLM(latency=0.25)
    llm.chat(LIST_FILES_TASK, TOOLS)
    llm.chat(LIST_FILES_TASK, None)
    assert slept == [0.25, 0.25]


def test_the_mock_without_latency_does_not_wait(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(mock.time, "sleep", slept.append)
    MockLLM().chat(LIST_FILES_TASK, TOOLS)
    assert slept == []


def test_an_interrupt_ends_the_mocks_wait_at_once():
    llm, interrupt = MockLLM(latency=30.0), Interrupt()
    threading.Timer(0.05, interrupt.set, (StopReason.HAND_BACK,)).start()
    with pytest.raises(Interrupted) as raised:
        llm.chat(LIST_FILES_TASK, TOOLS, interrupt=interrupt)
    assert raised.value.reason is StopReason.HAND_BACK


def test_a_turn_longer_than_the_time_left_times_out():
    with pytest.raises(ModelTimedOut, match="takes 30 seconds a turn"):
        MockLLM(latency=30.0).chat(LIST_FILES_TASK, TOOLS, timeout=0.01)


def test_the_factory_gives_the_mock_the_configured_latency(settings):
    settings.LOOP_MOCK_LATENCY_MS = 250
    llm = llm_for("mock")
    assert isinstance(llm, MockLLM)
    assert llm.latency == 0.25


def test_the_mock_asks_again_for_a_call_its_worker_was_stopped_in():
    run = Run("Count slowly to 3")
    run.result(ran("1"))
    second = run.call
    run.failed(ToolStatus.INTERRUPTED, INTERRUPTED_CALL)
    again = run.call
    assert (again.name, again.arguments) == (second.name, second.arguments)
    assert again.id != second.id
    run.result(ran("2"))
    assert "print(3)" in run.arguments["code"]  # the interrupted call is not counted as a step
    run.result(ran("3"))
    assert run.answer == "I counted to 3, one step a second."


def test_the_mocks_demo_goes_on_after_its_computation_was_interrupted():
    run = Run(DEMO)
    run.failed(ToolStatus.INTERRUPTED, INTERRUPTED_CALL)
    assert run.call.name == "run_code"
    run.result(ran("5050"))
    assert run.call.name == "read_file"


# what other modules wrote, read through their own readers ----------------------------------------


def test_a_loop_note_after_the_task_is_not_taken_for_the_task() -> None:
    run = Run("List my files")
    run.result("notes.txt (8 bytes)")
    run.messages.append({"role": "user", "content": loop_note("Go on from where you stopped.")})
    again = MockLLM().chat(run.messages, TOOLS)
    assert again.text == "notes.txt (8 bytes)"


def test_a_result_that_merely_looks_like_a_failure_is_a_result() -> None:
    run = Run("Read notes.txt")
    run.result("ERROR:42 is what the log says")  # a file's content, not a failure's mark
    assert run.answer == "ERROR:42 is what the log says"


@pytest.mark.parametrize(
    ("memory", "answer"),
    [
        (
            outcome_text("What is 17 * 23?", "succeeded", "17 * 23 = 391", []),
            "From an earlier run: 17 * 23 = 391",
        ),
        (
            outcome_text(
                "Compute the sum of 1..100 and save it to a file",
                "succeeded",
                "The sum of 1..100 is 5050. I saved it to sum.txt.\nIt took one try.",
                ["sum.txt (5050)"],
            ),
            "From an earlier run: The sum of 1..100 is 5050. I saved it to sum.txt.",
        ),
        (
            "my staging server is staging.example.com",
            "From an earlier run: " + ("my staging server is staging.example.com"),
        ),
    ],
)
def test_an_earlier_run_is_answered_from_the_memories_in_the_prompt(memory, answer) -> None:
    run = Run("What did I compute before?", system=SYSTEM + memory_section([memory]))
    assert run.answer == answer


def test_a_question_a_remembered_fact_answers_is_answered_from_it() -> None:
    memories = ["my staging server is staging.example.com", "my favourite colour is teal"]
    run = Run("What is my favourite colour?", system=SYSTEM + memory_section(memories))
    assert run.answer == "From what you told me: your favourite colour is teal"


def test_a_memory_over_several_lines_is_quoted_as_the_prompt_shows_it() -> None:
    memory = "my servers are:\nstaging.example.com"
    run = Run("What are my servers?", system=SYSTEM + memory_section([memory]))
    assert run.answer == "From what you told me: your servers are: | staging.example.com"


def test_run_codes_report_reads_back_whole() -> None:
    shown = report(None, "half\n", "Killed\n")
    led = parse_report(f"Killed after 3 seconds (timeout).\n{shown}")
    assert led is not None
    assert led.lead == "Killed after 3 seconds (timeout)."
    assert parse_report(shown) == replace(led, lead="")
    parsed = parse_report(shown)
    assert parsed is not None
    assert (parsed.exit_status, parsed.stdout, parsed.stderr) == (None, "half", "Killed")
    assert parse_report(report(0)).stdout == ""
    assert parse_report("no report here") is None


def test_the_mock_counts_again_a_step_a_stop_killed_once_the_run_goes_on():
    run = Run("Count slowly to 2")
    run.result(ran("1"))
    run.failed(ToolStatus.ERROR, f"{STOPPED}\nexit status: killed")  # then a Continue
    assert "print(2)" in run.arguments["code"]  # the killed step, not an answer quoting it
    run.result(ran("2"))
    assert run.answer == "I counted to 2, one step a second."
