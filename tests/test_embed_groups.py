"""Texts asked for by many threads at once are encoded in groups, each thread getting its own."""

import threading
import time

import numpy as np
import pytest

from memory.neural import Grouped

pytestmark = pytest.mark.fast


class SlowEncoder:
    """Each text's vector is [its number, its length]; an encode takes a moment, as MiniLM's."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, texts):
        self.calls.append(list(texts))
        time.sleep(0.02)
        if self.fail_on in texts:
            raise ValueError("the model failed")
        return np.array([[float(text.split()[-1]), float(len(text))] for text in texts])


def ask_at_once(grouped: Grouped, count: int) -> dict[int, object]:
    answers: dict[int, object] = {}
    start = threading.Barrier(count)

    def ask(number: int) -> None:
        start.wait()
        try:
            answers[number] = grouped.encode([f"text {number}", f"more {number}"]).tolist()
        except ValueError as error:
            answers[number] = error

    threads = [threading.Thread(target=ask, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return answers


def test_a_text_asked_for_alone_is_encoded_at_once_alone():
    encoder = SlowEncoder()
    assert Grouped(encoder).encode(["alone 7"]).tolist() == [[7.0, 7.0]]
    assert encoder.calls == [["alone 7"]]


def test_many_threads_at_once_are_encoded_in_groups_each_getting_its_own_vectors():
    encoder = SlowEncoder()
    answers = ask_at_once(Grouped(encoder), 40)
    for number in range(40):
        expected = [[number, len(f"text {number}")], [number, len(f"more {number}")]]
        assert answers[number] == expected
    assert sum(len(call) for call in encoder.calls) == 80  # each text encoded once
    assert len(encoder.calls) < 40  # in groups, not one encode per thread


def test_a_failed_encode_fails_its_group_and_the_next_groups_go_on():
    encoder = SlowEncoder(fail_on="text 0")
    grouped = Grouped(encoder)
    answers = ask_at_once(grouped, 20)
    failed = [number for number, answer in answers.items() if isinstance(answer, ValueError)]
    assert 0 in failed
    assert len(answers) == 20  # nobody was left waiting
    assert grouped.encode(["after 3"]).tolist() == [[3.0, 7.0]]  # the encoder is free again
