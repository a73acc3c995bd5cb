"""/v1/: Loop's agent as an OpenAI-compatible chat model, for the openai SDKs and the chat front
ends that speak their API (Open WebUI: Connections → OpenAI API → http(s)://HOST/v1 and a key).

`GET /v1/models` lists `loop` (the default model) and `loop:<model>` for each model this Loop
offers; `POST /v1/chat/completions` starts a new conversation whose task is the last user message,
whose instructions are the system messages, and whose context is the earlier messages
(AgentRun.prelude), and answers with the run's final answer, whole or streamed. The agent runs its
own tools: they are not OpenAI tool calls, and a request that offers tools is refused.

The same personal keys as /api/v1/ (RUN to complete, READ to list models) and the same request
rates; errors are in OpenAI's shape (`{"error": {"message", "type", "code", "param"}}`), so the
SDK raises its typed errors.

How the answer is sent (whole or streamed): only when the run has ended, as the run stores it.
A model's turn can stream text and then propose tool calls, or be retried after a malformed call,
and the stored answer can carry Loop's note (a reply cut short); a client of this API cannot take
back text it was sent, so no piece is sent before it is known to be the answer: the stream carries
its role at once, keep-alive comments while the agent works, and the answer once, when it is
final. A run that stops short of an answer (it waits for a decision, halted, failed, was stopped)
answers with what happened, its status and its links, as the assistant's words: a person in a chat
front end reads it there and can go and decide it on the page.

A client that goes away does not stop the run: it goes on, and its answer is in the person's chat.
"""

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Field, Schema
from ninja.errors import ValidationError
from pydantic import ConfigDict

from agent import runs, selectors
from agent.llm.factory import ModelChoice, offered_models
from agent.models import AgentRun
from agent.selectors import Logged
from api.auth import READ, RUN, PerKey, PerPerson, key_of, person_of
from api.documented import DocumentedOnce
from api.errors import ApiError, answer, first_problem, install, refusal
from api.follow import Ended, Quiet, follow
from api.runs import started_with, waiting_of
from core.events import ApprovalRequested, RunStatus
from rights.effective import rights_of

MODEL = "loop"
# OpenAI's error types, by the status they come with.
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}
STARTED = int(time.time())  # a model's `created`: Loop's models are as old as this process


class OpenAIError(ApiError):
    """A refusal of this API's, naming the request's part it is about (OpenAI's `param`)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(status, code, message)
        self.param = param


def openai_shape(error: ApiError) -> dict[str, Any]:
    """The error as OpenAI's API words one: what the openai SDKs read."""
    default = "server_error" if error.status >= 500 else "invalid_request_error"
    return {
        "error": {
            "message": error.message,
            "type": ERROR_TYPES.get(error.status, default),
            "code": error.code,
            "param": getattr(error, "param", None),
        }
    }


class ModelOut(Schema):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "loop"


class ModelList(Schema):
    object: str = "list"
    data: list[ModelOut]


class ChatMessage(Schema):
    model_config = ConfigDict(extra="allow")  # name, refusal, …: accepted, not read

    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[Any] | None = None


class StreamOptions(Schema):
    include_usage: bool = False


class CompletionIn(Schema):
    """OpenAI's request; what Loop does not use (temperature, max_tokens, …) is accepted and not
    read: the agent's model and limits are Loop's."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="`loop`, or `loop:<model>` of GET /v1/models.")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Any] | None = Field(None, description="Refused: Loop's agent runs its own tools.")
    tool_choice: Any = None


class Usage(Schema):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AnswerMessage(Schema):
    role: str
    content: str


class Choice(Schema):
    index: int
    message: AnswerMessage
    finish_reason: str


class CompletionOut(Schema):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class ErrorDetail(Schema):
    message: str
    type: str
    code: str | None
    param: str | None


class ErrorOut(Schema):
    error: ErrorDetail


REFUSED = {code: ErrorOut for code in (400, 401, 403, 404, 429)}

openai_api = DocumentedOnce(
    title="Loop's OpenAI-compatible API",
    version="1",
    description=__doc__ or "",
    urls_namespace="openai",
    auth=RUN,
    throttle=[PerKey(), PerPerson()],
    docs_url="/docs",
    openapi_url="/openapi.json",
)
install(openai_api, openai_shape)


@openai_api.exception_handler(ValidationError)
def invalid(request: HttpRequest, error: ValidationError) -> HttpResponse:
    """A malformed request is 400, as OpenAI answers it (not 422)."""
    message = first_problem(list(error.errors))
    return answer(openai_api, request, ApiError(400, "invalid_request", message))


def model_names(offered: list[ModelChoice]) -> dict[str, str]:
    """The model ids this API answers to, each with the name Loop knows: `loop` ("": the
    default) and `loop:<name>` for each offered model."""
    return {MODEL: "", **{f"{MODEL}:{choice.name}": choice.name for choice in offered}}


@openai_api.get("/models", response={200: ModelList, **REFUSED}, auth=READ, url_name="models")
def list_models(request: HttpRequest) -> ModelList:
    """`loop` (this Loop's default model) and `loop:<model>` for each model it offers you (those
    your groups allow)."""
    names = model_names(offered_models(rights_of(person_of(request))))
    return ModelList(data=[ModelOut(id=name, created=STARTED) for name in names])


@dataclass(frozen=True)
class Asked:
    """What a request asks, in Loop's terms."""

    task: str
    instructions: str
    prelude: list[dict[str, str]]


def text_of(message: ChatMessage, index: int) -> str:
    """A message's text: its string, or its text parts joined; any other part is refused."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise OpenAIError(
                400,
                "unsupported_content",
                f"Message {index} has a part of type {part.get('type')!r}; Loop's agent takes "
                "text only (give files through Loop's Files, or /api/v1/files).",
                f"messages[{index}].content",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def asked(messages: list[ChatMessage]) -> Asked:
    """The task (the last message, the user's), the instructions (the system messages) and the
    earlier user and assistant messages, consecutive ones of a role joined."""
    last = len(messages) - 1
    if messages[last].role != "user":
        raise OpenAIError(
            400,
            "invalid_request",
            "The last message must be the user's: it is the task for Loop's agent.",
            f"messages[{last}].role",
        )
    instructions: list[str] = []
    prelude: list[dict[str, str]] = []
    for index, message in enumerate(messages[:last]):
        if message.tool_calls or message.role not in ("system", "developer", "user", "assistant"):
            raise OpenAIError(
                400,
                "invalid_request",
                f"Message {index} ({message.role}) is a tool's call or result: Loop's agent runs "
                "its own tools; send system, user and assistant messages of text only.",
                f"messages[{index}]",
            )
        said = text_of(message, index)
        if message.role in ("system", "developer"):
            instructions.append(said)
        elif said and prelude and prelude[-1]["role"] == message.role:
            prelude[-1]["content"] += "\n\n" + said
        elif said:
            prelude.append({"role": message.role, "content": said})
    instructions_text = "\n\n".join(text for text in instructions if text.strip()).strip()
    return Asked(text_of(messages[last], last), instructions_text, prelude)


def model_for(name: str, person: User) -> ModelChoice:
    """The model a request names, checked: a name this API does not list is 404, as OpenAI's; one
    it offers that the person's groups do not allow is 403, saying which they may use."""
    rights = rights_of(person)
    offered = offered_models(rights)
    names = model_names(offered)
    if name not in names:
        everyone = model_names(offered_models())
        if name in everyone:
            try:
                runs.check_model_allowed(rights, everyone[name])
            except runs.ModelNotOffered as error:
                raise OpenAIError(403, "model_not_allowed", str(error), "model") from error
        raise OpenAIError(
            404,
            "model_not_found",
            f"The model {name[:80]!r} does not exist here: name one of {', '.join(names)} "
            "(GET /v1/models).",
            "model",
        )
    return runs.chat_model(None, names[name], offered, rights)


@dataclass(frozen=True)
class Reply:
    """A completion's fixed parts and where the run can be seen."""

    run_id: int
    model: str
    created: int
    page: str
    link: str

    @property
    def id(self) -> str:
        return f"chatcmpl-loop-{self.run_id}"


@openai_api.post(
    "/chat/completions", response={200: CompletionOut, **REFUSED}, url_name="chat_completions"
)
def complete(request: HttpRequest, body: CompletionIn) -> StreamingHttpResponse:
    """Start a new conversation with the last user message as its task and answer with the run's
    final answer: whole, or streamed as `chat.completion.chunk`s (`stream: true`)."""
    if body.tools:
        raise OpenAIError(
            400,
            "tools_not_supported",
            "Loop's agent runs its own tools; send the request without `tools`.",
            "tools",
        )
    person, key = person_of(request), key_of(request)
    choice = model_for(body.model, person)
    wanted = asked(body.messages)
    try:
        runs.count_message(person)
        run = runs.submit_first_run(
            person,
            wanted.task,
            model=choice,
            api_key=started_with(key),
            instructions=wanted.instructions,
            prelude=wanted.prelude,
        )
    except runs.InvalidTask as error:
        refused = refusal(error)
        raised = OpenAIError(refused.status, refused.code, refused.message, "messages")
        raised.headers = refused.headers  # a quota's or the send rate's Retry-After
        raise raised from error
    reply = Reply(
        run_id=run.pk,
        model=body.model,
        created=int(time.time()),
        page=request.build_absolute_uri(reverse("chat:conversation", args=[run.conversation_id])),
        link=request.build_absolute_uri(reverse("api:run", args=[run.pk])),
    )
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        response = StreamingHttpResponse(
            streamed(person, reply, usage=usage), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass the chunks on as they come
        return response
    return StreamingHttpResponse(whole(person, reply), content_type="application/json")


@dataclass(frozen=True)
class Outcome:
    """How the run stands when it is answered: the assistant's words, and its usage."""

    status: str
    content: str
    usage: Usage


async def working(person: User, run_id: int) -> AsyncIterator[None]:
    """Follow the run until it has ended or waits for its person's decision (parked: no worker
    goes on with it until they decide); a None each quiet while, for the caller's keep-alive."""
    # follow is an async generator: closed here, its run's group is left at once.
    async with aclosing(follow(person, run_id)) as followed:
        async for news in followed:
            if isinstance(news, Ended):
                return
            quiet = isinstance(news, Quiet)
            asks = isinstance(news, Logged) and isinstance(news.event, ApprovalRequested)
            if (quiet or asks) and await status_of(person, run_id) == RunStatus.AWAITING_APPROVAL:
                return
            if quiet:
                yield None


@database_sync_to_async
def status_of(person: User, run_id: int) -> str | None:
    return selectors.runs_for(person).filter(pk=run_id).values_list("status", flat=True).first()


@database_sync_to_async
def ended(person: User, reply: Reply) -> Outcome:
    run = selectors.runs_for(person).filter(pk=reply.run_id).first()
    if run is None:
        none = Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
        return Outcome("", f"The run {reply.run_id} is gone: it was deleted.", none)
    usage = Usage(
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        total_tokens=run.prompt_tokens + run.completion_tokens,
    )
    return Outcome(run.status, words_for(run, reply), usage)


def words_for(run: AgentRun, reply: Reply) -> str:
    """The answer, or, for a run that has none, what happened and where to go on from here."""
    if run.status == RunStatus.SUCCEEDED:
        return run.answer
    where = f"Its page: {reply.page} · the API's: {reply.link}"
    if run.status == RunStatus.AWAITING_APPROVAL:
        tools = ", ".join(sorted({call.tool for call in waiting_of(run)})) or "a tool"
        return (
            f"Loop's agent waits for your decision before it runs {tools} (the run's status: "
            f"awaiting_approval). Approve or deny it on the run's page and the run goes on; its "
            f"answer will be in that conversation. {where}"
        )
    said = {
        RunStatus.HALTED: f"The run halted ({run.halt_reason or 'a limit'}) before it finished",
        RunStatus.FAILED: f"The run failed: {run.error or 'see its page'}",
        RunStatus.CANCELLED: "The run was stopped before it finished",
        RunStatus.INTERRUPTED: "The run was interrupted before it finished",
    }.get(RunStatus(run.status), "The run has no answer")
    told = f"{run.answer}\n\n---\n" if run.answer else ""
    return f"{told}{said} (status: {run.status}). You can continue it on its page. {where}"


def completion(reply: Reply, outcome: Outcome) -> dict[str, Any]:
    body = CompletionOut(
        id=reply.id,
        object="chat.completion",
        created=reply.created,
        model=reply.model,
        choices=[
            Choice(
                index=0,
                message=AnswerMessage(role="assistant", content=outcome.content),
                finish_reason="stop",
            )
        ],
        usage=outcome.usage,
    ).model_dump()
    return body | {"loop": loop_part(reply, outcome)}


def loop_part(reply: Reply, outcome: Outcome) -> dict[str, Any]:
    """Loop's own part of a completion, for programs: the run, its status and its links."""
    return {"run": reply.run_id, "status": outcome.status, "page": reply.page, "api": reply.link}


async def whole(person: User, reply: Reply) -> AsyncIterator[bytes]:
    """The whole completion, once the run has ended; a space (JSON's whitespace) each quiet
    while, so no proxy takes the wait for a dead connection."""
    async for _ in working(person, reply.run_id):
        yield b" "
    yield json.dumps(completion(reply, await ended(person, reply))).encode()


def chunk(reply: Reply, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": reply.id,
        "object": "chat.completion.chunk",
        "created": reply.created,
        "model": reply.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body)}\n\n".encode()


async def streamed(person: User, reply: Reply, *, usage: bool) -> AsyncIterator[bytes]:
    """The completion as chunks: the role at once, a keep-alive comment each quiet while, the
    answer once it is final, the finish, the usage if asked (no choices, as OpenAI's), and
    [DONE]."""
    yield event(chunk(reply, {"role": "assistant", "content": ""}))
    async for _ in working(person, reply.run_id):
        yield b": the agent is working\n\n"
    result = await ended(person, reply)
    if result.content:
        yield event(chunk(reply, {"content": result.content}))
    yield event(chunk(reply, {}, "stop") | {"loop": loop_part(reply, result)})
    if usage:
        yield event(chunk(reply, {}) | {"choices": [], "usage": result.usage.model_dump()})
    yield b"data: [DONE]\n\n"
