"""The `remember` tool: the model stores a fact for its user, on purpose."""

from django.contrib.auth import get_user_model
from django.db import connection
from pydantic import BaseModel, ConfigDict, Field

from memory.models import Origin
from memory.store import MAX_MEMORY_CHARS, MemoryOutcome, remember
from tools.base import Tool, ToolContext

# What the model reads back for each outcome (the Memories page words them for a person).
OUTCOMES = {
    MemoryOutcome.STORED: "Remembered.",
    MemoryOutcome.DUPLICATE: "I already remembered that.",
    MemoryOutcome.MERGED: "Updated an earlier, nearly identical memory with this wording.",
    MemoryOutcome.DROPPED: (
        "Not kept: the memory store is full of memories worth more than this one."
    ),
}


class RememberArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    fact: str = Field(
        min_length=1,
        max_length=MAX_MEMORY_CHARS,
        description="The fact to remember, complete on its own (it will be read without this "
        "conversation), e.g. 'The user's staging server is staging.example.com'.",
    )
    importance: float = Field(
        default=0.7, ge=0.0, le=1.0, description="How much it matters, from 0 to 1."
    )


def remember_fact(arguments: RememberArguments, context: ToolContext) -> str:
    try:
        owner = get_user_model().objects.get(pk=context.user_id)
        done = remember(
            owner,
            arguments.fact,
            importance=arguments.importance,
            origin=Origin.TOLD,
            source_run_id=context.run_id,
        )
        return OUTCOMES[done.outcome]
    finally:
        # The dispatcher runs this in a thread of its own, whose connection must not outlive it.
        connection.close()


REMEMBER = Tool(
    name="remember",
    description=(
        "Store a fact in the user's long-term memory, for later runs. Use it for lasting facts "
        "and preferences the user states, not for intermediate results."
    ),
    arguments=RememberArguments,
    function=remember_fact,
    timeout=30,
)
