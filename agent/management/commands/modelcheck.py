"""`manage.py modelcheck`: does the configured model work on its server? It lists the server's
models, looks for the model among them, and makes one tiny tool-calling request the way a run
makes its requests. One of the two commands that call out on purpose (`groqcheck` is the other:
this check, for Groq only)."""

import json
import time
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.llm.chat_completions import ChatCompletionsLLM
from agent.llm.factory import (
    GROQ,
    MOCK,
    OPENAI,
    ModelChoice,
    ModelUnavailable,
    default_model,
    llm_for,
    parse,
    resolve,
)
from agent.llm.groq import TOOL_CALLING_MODELS
from agent.llm.mistakes import SERVER_FLAGS_HINT
from agent.llm.openai_compat import OpenAICompatibleLLM
from core.llm import LLMError, Reply, ToolSpec
from core.loop import ask_correcting

NOTHING_TO_CHECK = 2
FAILED = 1

# A hosted router lists hundreds of models; past this many only the configured one is shown.
SHOWN_MODELS = 40

ADD_TOOL: ToolSpec = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two whole numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
ADD_TASK = [{"role": "user", "content": "Use the add tool to add 2 and 3."}]


@dataclass(frozen=True)
class Server:
    """What the messages call a provider's server, and the settings a person changes for it."""

    listing: str  # the heading of the models it lists
    works: str  # the last line when everything worked
    key_setting: str
    no_tool_call_hint: str  # what to do about a model that answered instead of calling


def server_of(llm: ChatCompletionsLLM) -> Server:
    if llm.provider == GROQ:
        return Server(
            listing="Models this key can use",
            works="Groq works.",
            key_setting="GROQ_API_KEY",
            no_tool_call_hint=f"pick a model that calls tools, such as {TOOL_CALLING_MODELS[0]!r}",
        )
    return Server(
        listing=f"Models {llm.server} lists",
        works=f"{_sentence(llm.server)} works.",
        key_setting="LOOP_OPENAI_API_KEY",
        no_tool_call_hint=SERVER_FLAGS_HINT,
    )


def status_of(error: LLMError) -> int | None:
    """The HTTP status behind an LLMError, if the server answered with one."""
    return error.status


def stream_nowhere(piece: str) -> None:
    """Runs stream their replies, so the check's request is streamed too, and nothing shows it."""


class Command(BaseCommand):
    help = (
        "Check the model runs use (LOOP_MODEL, LOOP_MODELS' first, or --model NAME: mock, "
        "groq:<model>, openai:<model> or a bare name) on its server: list the server's models, "
        "say whether the model is among them, and make one tiny tool-calling request with it, "
        "as a run would. Exit status: 0 works, 1 does not, 2 nothing to check (the mock model, "
        "no GROQ_API_KEY, no LOOP_OPENAI_BASE_URL)."
    )

    # The checks of the configuration must not stop the command that explains what is wrong
    # with it (a server without a model named is a system check error, and this lists its models).
    requires_system_checks = ()

    # Only this provider's models are checked (groqcheck: Groq's); None: any.
    provider: ClassVar[str | None] = None

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--model",
            default="",
            help="The model to check, named as LOOP_MODEL names it (default: the default model).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name, setting = self.model_name(options["model"])
        # Not the mock (nothing to check): Groq's client or an OpenAI-compatible server's.
        llm = cast(ChatCompletionsLLM, llm_for(self.choose(name), deltas=stream_nowhere))
        server = server_of(llm)
        listed = self.list_models(llm, server)
        self.check_listed(llm, listed, setting or llm.dialect.model_setting)
        self.check_tool_call(llm, server)

    def model_name(self, given: str) -> tuple[str, str]:
        """The model to check, and the setting that named it ("" for the provider's own
        LOOP_GROQ_MODEL or LOOP_OPENAI_MODEL), which the messages say to change."""
        if given:
            return given, "--model"
        if settings.LOOP_MODEL:
            return settings.LOOP_MODEL, "LOOP_MODEL"
        if settings.LOOP_MODELS:
            return settings.LOOP_MODELS[0], "LOOP_MODELS"
        return default_model(), ""

    def choose(self, name: str) -> ModelChoice:
        choice = parse(name)
        if self.provider is not None and choice.provider != self.provider:
            raise CommandError(
                f"{name!r} is not a Groq model. `manage.py modelcheck --model {name}` checks it.",
                returncode=NOTHING_TO_CHECK,
            )
        if choice.name == MOCK:
            raise CommandError(
                f"The model is {MOCK!r}, Loop's keyless mock model: there is nothing to check. Set "
                "LOOP_OPENAI_BASE_URL and LOOP_OPENAI_MODEL for a model server, or GROQ_API_KEY "
                "for Groq (docs/models.md).",
                returncode=NOTHING_TO_CHECK,
            )
        if choice.provider == OPENAI and not choice.model and settings.LOOP_OPENAI_BASE_URL:
            self.name_a_model()
        try:
            return resolve(choice)
        except ModelUnavailable as error:
            raise CommandError(
                f"{error} There is nothing to check.", returncode=NOTHING_TO_CHECK
            ) from None

    def name_a_model(self) -> None:
        """A server is configured but no model on it: its models are what to pick from."""
        llm = OpenAICompatibleLLM(
            "",
            base_url=settings.LOOP_OPENAI_BASE_URL,
            api_key=settings.LOOP_OPENAI_API_KEY,
            timeout=settings.LOOP_OPENAI_TIMEOUT,
        )
        self.list_models(llm, server_of(llm))
        raise CommandError(
            "LOOP_OPENAI_BASE_URL is set but no model is named: set LOOP_OPENAI_MODEL to one of "
            "these (or name one in LOOP_MODEL as openai:<model>).",
            returncode=FAILED,
        )

    def list_models(self, llm: ChatCompletionsLLM, server: Server) -> list[str]:
        try:
            models = llm.available_models()
        except LLMError as error:
            raise CommandError(
                f"Could not list {llm.server_s} models: {error}{self.key_hint(error, server)}",
                returncode=FAILED,
            ) from None
        self.stdout.write(f"{server.listing} ({len(models)}):")
        shown = models[:SHOWN_MODELS]
        if llm.model in models[SHOWN_MODELS:]:
            shown.append(llm.model)
        for name in shown:
            marker = "  <- configured" if name == llm.model else ""
            self.stdout.write(f"  {name}{marker}")
        if len(models) > len(shown):
            self.stdout.write(f"  ... and {len(models) - len(shown)} more")
        return models

    def key_hint(self, error: LLMError, server: Server) -> str:
        """What to change when the server refused the key (or the lack of one)."""
        if status_of(error) not in (401, 403):
            return ""
        if server.key_setting == "LOOP_OPENAI_API_KEY" and not settings.LOOP_OPENAI_API_KEY:
            return " LOOP_OPENAI_API_KEY is not set, and this server wants a key: set it."
        return f" Set {server.key_setting} to a key it takes."

    def check_listed(self, llm: ChatCompletionsLLM, listed: list[str], setting: str) -> None:
        which = "The model" if setting == "--model" else "The configured model"
        if llm.model in listed:
            self.stdout.write(f"{which} {llm.model!r} is among them.")
            return
        change = "Pass --model one" if setting == "--model" else f"Set {setting} to one"
        pull = (
            f" (If the server is Ollama, `ollama pull {llm.model}` fetches it.)"
            if llm.provider == OPENAI
            else ""
        )
        raise CommandError(
            f"{which} {llm.model!r} is not among them. {change} that is.{pull}",
            returncode=FAILED,
        )

    def check_tool_call(self, llm: ChatCompletionsLLM, server: Server) -> None:
        started = time.monotonic()
        try:
            # As a run asks: a mistake of the model's is fed back to it once.
            reply = ask_correcting(lambda messages: llm.chat(messages, [ADD_TOOL]), ADD_TASK)
        except LLMError as error:
            raise CommandError(
                f"The tool-calling request failed: {error}{self.key_hint(error, server)}",
                returncode=FAILED,
            ) from None
        took = time.monotonic() - started
        arguments = self.add_arguments_of(llm, reply, server)
        self.stdout.write(
            f"Tool call: {llm.model} called add({arguments}) in {took:.2f}s, "
            f"{self.tokens(reply)}. {server.works}"
        )

    def add_arguments_of(self, llm: ChatCompletionsLLM, reply: Reply, server: Server) -> str:
        """The arguments of the model's call to add, if it called add(2, 3) as asked."""
        calls = [call for call in reply.tool_calls if call.name == "add"]
        if not calls:
            raise CommandError(
                f"{llm.model} answered without calling the tool: {reply.text[:200]!r}. Loop's "
                f"agent needs tool calling: {server.no_tool_call_hint}.",
                returncode=FAILED,
            )
        arguments = calls[0].arguments
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or {parsed.get("a"), parsed.get("b")} != {2, 3}:
            raise CommandError(
                f"{llm.model} called add with unexpected arguments: {arguments}",
                returncode=FAILED,
            )
        return arguments

    def tokens(self, reply: Reply) -> str:
        if not reply.usage.total_tokens:
            return "no token counts (the server sent none)"
        return f"{reply.usage.total_tokens} tokens"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
