"""/v1/: Loop's agent as an OpenAI model, through a real daphne and a real worker, with the official
openai SDK: the models it lists, a completion whole and streamed (the answer and usage the run
stored), the earlier messages and the system message reaching the model, a run that waits for a
decision answering with its links, and the refusals the SDK raises as its typed errors. The
prelude's place in the model's context is tested at the selectors, with no server."""

from collections.abc import Callable

import openai
import pytest
from django.contrib.auth.models import User

from agent.forgotten import FORGOTTEN, unquote
from agent.models import AgentRun, Conversation
from agent.runs import InvalidTask, submit_first_run
from agent.selectors import conversation_context, history_of
from api.keys import create_key, keys_of, revoke
from api.models import Scope
from api.openai_compat import ChatMessage, OpenAIError, asked
from approvals.models import ApprovalPreference
from core.events import RunStatus
from core.instructions import INSTRUCTIONS_CHARS
from tests.conftest import wait_for
from tests.socket_harness import LiveSite

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then "17 * 23 = 391"


def sdk(site: LiveSite, key: str) -> openai.OpenAI:
    """The official client, pointed at the site's /v1 with `key`; no retries (a refusal is seen
    once)."""
    return openai.OpenAI(base_url=f"{site.url}/v1", api_key=key, max_retries=0)


def only_run(person: User) -> AgentRun:
    return AgentRun.objects.get(user=person)


@pytest.fixture
def site(start_daphne: Callable[..., LiveSite]) -> LiveSite:
    return start_daphne()


# Through daphne and a worker.


@pytest.mark.django_db(transaction=True)
def test_the_models_are_loop_and_loop_with_each_offered_model(site, alice_key):
    listed = sdk(site, alice_key).models.list()
    assert [model.id for model in listed.data] == ["loop", "loop:mock"]
    assert {(model.object, model.owned_by) for model in listed.data} == {("model", "loop")}


@pytest.mark.django_db(transaction=True)
def test_a_whole_completion_is_the_runs_answer_with_its_usage(start_worker, site, alice, alice_key):
    start_worker()
    completion = sdk(site, alice_key).chat.completions.create(
        model="loop",
        messages=[
            {"role": "system", "content": "Answer in one line."},
            {"role": "user", "content": PRODUCT},
        ],
    )
    run = only_run(alice)
    assert run.status == RunStatus.SUCCEEDED
    assert completion.id == f"chatcmpl-loop-{run.pk}"
    assert completion.model == "loop"
    [choice] = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == run.answer
    assert "391" in run.answer
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == run.prompt_tokens > 0
    assert completion.usage.completion_tokens == run.completion_tokens > 0
    assert completion.usage.total_tokens == run.prompt_tokens + run.completion_tokens
    # The system message is the conversation's instructions, in the model's system prompt.
    assert Conversation.objects.get(pk=run.conversation_id).instructions == "Answer in one line."
    assert "Answer in one line." in history_of(run)[0]["content"]
    assert run.api_key is not None
    assert run.api_key["prefix"] == alice_key[:16]


@pytest.mark.django_db(transaction=True)
def test_a_streamed_completion_assembles_the_runs_answer_then_its_usage(
    start_worker, site, alice, alice_key
):
    start_worker()
    stream = sdk(site, alice_key).chat.completions.create(
        model="loop:mock",
        messages=[{"role": "user", "content": [{"type": "text", "text": PRODUCT}]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    run = only_run(alice)
    assert run.status == RunStatus.SUCCEEDED
    assert {chunk.id for chunk in chunks} == {f"chatcmpl-loop-{run.pk}"}
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == run.answer
    assert "391" in text
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert [reason for reason in finishes if reason] == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        run.prompt_tokens,
        run.completion_tokens,
    )
    assert run.prompt_tokens > 0


@pytest.mark.django_db(transaction=True)
def test_the_earlier_messages_reach_the_model_before_the_task(start_worker, site, alice, alice_key):
    start_worker()
    earlier = [
        {"role": "user", "content": PRODUCT},
        {"role": "assistant", "content": "17 * 23 = 391."},
    ]
    completion = sdk(site, alice_key).chat.completions.create(
        model="loop", messages=[*earlier, {"role": "user", "content": "Save that to result.txt"}]
    )
    run = only_run(alice)
    assert run.task == "Save that to result.txt"
    assert run.prelude == earlier
    # The mock saves the value the previous answer gave: it read the earlier messages.
    assert completion.choices[0].message.content == "I saved 391 to result.txt."
    seen = history_of(run)
    assert [message for message in seen if message in earlier] == earlier
    assert seen.index(earlier[-1]) < seen.index({"role": "user", "content": run.task})


@pytest.mark.django_db(transaction=True)
def test_a_run_that_waits_for_a_decision_answers_with_its_links(
    start_worker, site, alice, alice_key
):
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    start_worker()
    completion = sdk(site, alice_key).chat.completions.create(
        model="loop", messages=[{"role": "user", "content": PRODUCT}]
    )
    run = only_run(alice)
    assert run.status == RunStatus.AWAITING_APPROVAL
    said = completion.choices[0].message.content or ""
    assert "awaiting_approval" in said
    assert "run_code" in said
    assert f"{site.url}/c/{run.conversation_id}/" in said
    assert f"{site.url}/api/v1/runs/{run.pk}" in said
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.django_db(transaction=True)
def test_a_client_that_goes_away_mid_stream_leaves_the_run_to_finish(
    start_worker, site, alice, alice_key
):
    start_worker()
    stream = sdk(site, alice_key).chat.completions.create(
        model="loop", messages=[{"role": "user", "content": "Count slowly to 3"}], stream=True
    )
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    stream.close()
    run = only_run(alice)
    wait_for(lambda: AgentRun.objects.get(pk=run.pk).is_finished, "the run to finish")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.answer == "I counted to 3, one step a second."


@pytest.mark.django_db(transaction=True)
def test_the_refusals_are_the_sdks_typed_errors(site, alice, alice_key):
    client = sdk(site, alice_key)
    task = [{"role": "user", "content": PRODUCT}]
    with pytest.raises(openai.NotFoundError) as absent:
        client.chat.completions.create(model="gpt-4o", messages=task)
    assert absent.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="runs its own tools"):
        client.chat.completions.create(
            model="loop",
            messages=task,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    with pytest.raises(openai.BadRequestError, match="messages"):  # OpenAI's 400, not 422
        client.chat.completions.create(model="loop", messages=[])
    picture = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    with pytest.raises(openai.BadRequestError, match="text only"):
        client.chat.completions.create(
            model="loop", messages=[{"role": "user", "content": picture}]
        )
    with pytest.raises(openai.BadRequestError, match="instructions are"):
        client.chat.completions.create(
            model="loop",
            messages=[{"role": "system", "content": "x" * (INSTRUCTIONS_CHARS + 1)}, *task],
        )
    with pytest.raises(openai.BadRequestError, match="characters long"):
        client.chat.completions.create(
            model="loop", messages=[{"role": "user", "content": "x" * 1_000_000}]
        )
    assert not AgentRun.objects.exists()  # nothing refused was started
    for _ in range(2):  # no worker: the runs stay queued, each holding a place
        submit_first_run(alice, "Count slowly to 3", model="mock")
    with pytest.raises(openai.RateLimitError, match="Wait for one to finish"):
        client.chat.completions.create(model="loop", messages=task)


@pytest.mark.django_db(transaction=True)
def test_a_missing_revoked_or_out_of_scope_key_is_refused(site, alice, alice_key):
    task = [{"role": "user", "content": PRODUCT}]
    with pytest.raises(openai.AuthenticationError):  # no Authorization header at all
        sdk(site, alice_key).models.list(extra_headers={"Authorization": openai.omit})
    with pytest.raises(openai.AuthenticationError):
        sdk(site, "loop_nosuchkey_x").chat.completions.create(model="loop", messages=task)
    reader = create_key(alice, "reader", [Scope.READ]).secret
    assert sdk(site, reader).models.list().data
    with pytest.raises(openai.PermissionDeniedError, match="run"):
        sdk(site, reader).chat.completions.create(model="loop", messages=task)
    revoke(keys_of(alice), alice_key[:16])
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(site, alice_key).models.list()
    assert refused.value.body["type"] == "authentication_error"
    assert not AgentRun.objects.exists()


# What a request asks, and where the prelude goes in the model's context: no server.


def messages(*said: tuple[str, object]) -> list[ChatMessage]:
    return [ChatMessage(role=role, content=content) for role, content in said]


def test_the_task_is_the_last_message_and_the_system_messages_the_instructions():
    wanted = asked(
        messages(
            ("system", "Be brief."),
            ("user", "one"),
            ("user", [{"type": "text", "text": "two"}]),
            ("assistant", "three"),
            ("developer", "Use metric units."),
            ("user", "four"),
        )
    )
    assert wanted.task == "four"
    assert wanted.instructions == "Be brief.\n\nUse metric units."
    assert wanted.prelude == [
        {"role": "user", "content": "one\n\ntwo"},  # one role's messages in a row: one message
        {"role": "assistant", "content": "three"},
    ]


@pytest.mark.parametrize(
    "said",
    [
        (("user", "a"), ("assistant", "b")),  # the last is no task
        (("tool", "a"), ("user", "b")),  # Loop runs its own tools
        (("user", [{"type": "input_audio", "input_audio": {}}]),),
    ],
)
def test_what_loop_cannot_take_is_refused(said):
    with pytest.raises(OpenAIError) as refused:
        asked(messages(*said))
    assert refused.value.status == 400
    assert refused.value.param
    assert refused.value.param.startswith("messages[")


PRELUDE = [
    {"role": "user", "content": "first question " + "word " * 20},
    {"role": "assistant", "content": "first answer " + "word " * 20},
]


@pytest.mark.django_db
def test_the_prelude_comes_before_the_conversations_own_turns(alice):
    first = submit_first_run(alice, "task one", model="mock", prelude=PRELUDE)
    assert conversation_context(first) == PRELUDE
    AgentRun.objects.filter(pk=first.pk).update(status=RunStatus.SUCCEEDED, answer="answer one")
    second = AgentRun.objects.create(
        user=alice, conversation_id=first.conversation_id, parent=first, task="task two"
    )
    assert conversation_context(second) == [
        *PRELUDE,
        {"role": "user", "content": "task one"},
        {"role": "assistant", "content": "answer one"},
    ]


@pytest.mark.django_db
def test_the_oldest_of_the_prelude_is_left_out_first_with_a_note(alice, settings):
    first = submit_first_run(alice, "task one", model="mock", prelude=PRELUDE)
    AgentRun.objects.filter(pk=first.pk).update(status=RunStatus.SUCCEEDED, answer="answer one")
    second = AgentRun.objects.create(
        user=alice, conversation_id=first.conversation_id, parent=first, task="task two"
    )
    settings.LOOP_CONVERSATION_TOKENS = 40  # the turn and the prelude's last message, no more
    context = conversation_context(second)
    assert context == [
        {
            "role": "system",
            "content": "[Loop] 1 earlier message given with its first task left out to fit the "
            "context budget.",
        },
        PRELUDE[1],
        {"role": "user", "content": "task one"},
        {"role": "assistant", "content": "answer one"},
    ]
    settings.LOOP_CONVERSATION_TOKENS = 1  # not even the turn
    assert conversation_context(second)[0]["content"] == (
        "[Loop] 1 earlier turn of this conversation and 2 earlier messages given with its first "
        "task left out to fit the context budget."
    )


@pytest.mark.django_db
def test_a_stored_prelude_gives_the_model_only_messages_of_text(alice):
    run = submit_first_run(alice, "task", model="mock")
    stored = [{"role": "system", "content": "obey"}, {"role": "user"}, "text", PRELUDE[0]]
    AgentRun.objects.filter(pk=run.pk).update(prelude=stored)
    run.refresh_from_db()
    assert conversation_context(run) == [PRELUDE[0]]


@pytest.mark.django_db
def test_instructions_longer_than_a_conversation_keeps_are_refused_before_anything_is_stored(
    alice,
):
    with pytest.raises(InvalidTask, match="at most"):
        submit_first_run(alice, "task", model="mock", instructions="x" * (INSTRUCTIONS_CHARS + 1))
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_a_memory_taken_back_is_taken_out_of_a_prelude_too(alice, bob):
    said = [{"role": "assistant", "content": "Your server is staging.example.com, I recall."}]
    mine = submit_first_run(alice, "task", model="mock", prelude=said)
    theirs = submit_first_run(bob, "task", model="mock", prelude=said)
    assert unquote(alice, ["staging.example.com"]) == 1
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.prelude == [
        {"role": "assistant", "content": f"Your server is {FORGOTTEN}, I recall."}
    ]
    assert theirs.prelude == said
