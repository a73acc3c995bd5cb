"""The layers read tools -> memory -> agent, one way: a lower layer never imports a higher one."""

import ast
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
HIGHER = {
    "tools": {"memory", "agent", "chat", "accounts"},
    "memory": {"agent", "chat", "accounts"},
    "agent": {"chat", "accounts"},
}


def imported_apps(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("layer", sorted(HIGHER))
def test_a_lower_layer_imports_nothing_from_a_higher_one(layer):
    offenders = {
        str(path.relative_to(PROJECT_DIR)): sorted(imported_apps(path) & HIGHER[layer])
        for path in (PROJECT_DIR / layer).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {path: apps for path, apps in offenders.items() if apps} == {}


def test_the_loop_knows_no_django():
    assert "django" not in imported_apps(PROJECT_DIR / "agent" / "loop.py")
