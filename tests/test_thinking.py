"""A reasoning model's thinking in <think> tags at the start of its text (Ollama, llama.cpp and vLLM
without a reasoning parser, qwen3 and DeepSeek-R1 models): split_thinking for a whole reply, and
ThinkingFilter for a streamed one, which must show exactly the answer the whole reply would have,
wherever the server's pieces split the tags."""

import itertools

import pytest

from agent.llm.replies import ThinkingFilter, split_thinking

pytestmark = pytest.mark.fast

THOUGHT = "The sum of 1..100 is 100 * 101 / 2, which is 5050. I will say so."
REPLIES = {
    "thinking-then-answer": f"<think>{THOUGHT}</think>\n\nIt is 5050.",
    "whitespace-first": f"\n  <think>\n{THOUGHT}\n</think>\nIt is 5050.",
    "no-thinking": "It is 5050.",
    "answer-starting-with-a-tag": "<b>5050</b> is the sum.",
    "a-tag-that-is-not-think": "<thinking>is not a tag Loop knows</thinking> 5050",
    "think-later-in-the-answer": "It is 5050. <think>not thinking</think>",
    "thinking-only": f"<think>{THOUGHT}</think>",
    "cut-off-while-thinking": f"<think>{THOUGHT}",
    "a-close-tag-in-the-answer": f"<think>{THOUGHT}</think>5050 </think> done",
    "markup-inside-the-thinking": "<think>a </b> and </thin and <think></think>It is 5050.",
    "empty": "",
}


def stream(text: str, pieces: list[int]) -> tuple[str, ThinkingFilter]:
    """Feed `text` cut at `pieces` (offsets) to a filter; what it showed, and the filter."""
    thinking, shown = ThinkingFilter(), []
    bounds = [0, *pieces, len(text)]
    for start, end in itertools.pairwise(bounds):
        shown.append(thinking.feed(text[start:end]))
    return "".join(shown), thinking


@pytest.mark.parametrize("text", REPLIES.values(), ids=REPLIES.keys())
def test_a_streamed_reply_cut_anywhere_shows_what_the_whole_reply_answers(text):
    thought, answer = split_thinking(text)
    for cut in range(len(text) + 1):
        shown, thinking = stream(text, [cut])
        assert (shown, thinking.thinking) == (answer, thought), f"cut at {cut}"


@pytest.mark.parametrize("text", REPLIES.values(), ids=REPLIES.keys())
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8])
def test_a_streamed_reply_in_small_pieces_shows_what_the_whole_reply_answers(text, size):
    thought, answer = split_thinking(text)

    shown, thinking = stream(text, list(range(size, len(text), size)))

    assert (shown, thinking.thinking) == (answer, thought)


def test_split_thinking_parts():
    assert split_thinking(REPLIES["thinking-then-answer"]) == (THOUGHT, "It is 5050.")
    assert split_thinking(REPLIES["cut-off-while-thinking"]) == (THOUGHT, "")
    assert split_thinking("It is 5050.") == ("", "It is 5050.")


def test_an_answer_without_thinking_is_shown_as_it_comes():
    thinking = ThinkingFilter()

    assert thinking.feed("It") == "It"  # not held back: it cannot be a <think> tag
    assert thinking.feed(" is 5050.") == " is 5050."


def test_only_what_could_still_be_the_opening_tag_is_held_back():
    thinking = ThinkingFilter()

    assert thinking.feed("<thi") == ""
    assert thinking.feed("s is bold") == "<this is bold"


def test_the_thinking_is_never_shown_while_it_comes():
    thinking = ThinkingFilter()

    assert [thinking.feed(piece) for piece in ("<think>", "Let me ", "see.", "</thi")] == [""] * 4
    assert thinking.feed("nk>\n\nFine.") == "Fine."
    assert thinking.thinking == "Let me see."
