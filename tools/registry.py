"""The tools this app provides, and a registry of tools configured from settings.

The set a run gets is composed above this layer (agent/toolset.py), which adds tools of other apps.
"""

from collections.abc import Iterable

from django.conf import settings

from tools.base import Tool, ToolRegistry, Withdrawn
from tools.code import RUN_CODE
from tools.files import LIST_FILES, READ_FILE, WRITE_FILE
from tools.search import WEB_SEARCH

BUILTIN_TOOLS = (RUN_CODE, READ_FILE, WRITE_FILE, LIST_FILES, WEB_SEARCH)


def registry_of(tools: Iterable[Tool], withdrawn: Withdrawn | None = None) -> ToolRegistry:
    return ToolRegistry(
        list(tools), max_result_chars=settings.LOOP_TOOL_RESULT_MAX_CHARS, withdrawn=withdrawn
    )
