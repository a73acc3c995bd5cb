"""A rough token count for models that do not report one (the mock and scripted models)."""

import json
import re
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def count_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    counted = json.dumps(messages) + (json.dumps(tools) if tools else "")
    return count_tokens(counted)
