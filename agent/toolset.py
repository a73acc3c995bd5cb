"""The tools a run gets: the tools app's own, and memory's `remember`."""

from memory.tools import REMEMBER
from tools.base import ToolRegistry
from tools.registry import BUILTIN_TOOLS, registry_of


def default_registry() -> ToolRegistry:
    return registry_of([*BUILTIN_TOOLS, REMEMBER])
