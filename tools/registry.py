"""The registry of the tools the agent may call, configured from settings."""

from django.conf import settings

from memory.tools import REMEMBER
from tools.base import ToolRegistry
from tools.code import RUN_CODE
from tools.files import LIST_FILES, READ_FILE, WRITE_FILE
from tools.search import WEB_SEARCH


def default_registry() -> ToolRegistry:
    return ToolRegistry(
        [RUN_CODE, READ_FILE, WRITE_FILE, LIST_FILES, WEB_SEARCH, REMEMBER],
        max_result_chars=settings.LOOP_TOOL_RESULT_MAX_CHARS,
    )
