"""The layers read tools -> memory -> agent -> {console, chat, accounts}, one way: a lower layer
never imports a higher one, nor names a higher app's model in its schema or its migrations."""

import ast
from pathlib import Path

import pytest
from django.apps import apps
from django.db.migrations.loader import MigrationLoader

PROJECT_DIR = Path(__file__).resolve().parent.parent
TOP = {"console", "chat", "accounts"}
HIGHER = {
    "tools": {"memory", "agent", *TOP},
    "memory": {"agent", *TOP},
    "agent": TOP,
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


def named_models(path: Path) -> set[str]:
    """The apps of every "app.Model" string in a module (a foreign key's target, say)."""
    tree = ast.parse(path.read_text())
    return {
        node.value.split(".")[0].lower()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.count(".") == 1
        and node.value.split(".")[1][:1].isupper()
    }


def modules(layer: str) -> list[Path]:
    return sorted((PROJECT_DIR / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(HIGHER))
def test_a_lower_layer_imports_nothing_from_a_higher_one(layer):
    offenders = {
        str(path.relative_to(PROJECT_DIR)): sorted(imported_apps(path) & HIGHER[layer])
        for path in modules(layer)
    }
    assert {path: apps for path, apps in offenders.items() if apps} == {}


@pytest.mark.parametrize("layer", sorted(HIGHER))
def test_a_lower_layer_names_no_model_of_a_higher_one(layer):
    """Models and migrations included: "agent.AgentRun" in memory/ is an arrow back up."""
    offenders = {
        str(path.relative_to(PROJECT_DIR)): sorted(named_models(path) & HIGHER[layer])
        for path in modules(layer)
    }
    assert {path: apps for path, apps in offenders.items() if apps} == {}


@pytest.mark.parametrize("layer", sorted(HIGHER))
def test_a_lower_layers_schema_points_at_no_higher_app(layer):
    """Every relation of the app's models, as Django sees them (a string target included)."""
    targets = {
        f"{model.__name__}.{field.name}": field.related_model._meta.app_label
        for model in apps.get_app_config(layer).get_models()
        for field in model._meta.get_fields()
        if field.is_relation and field.concrete and field.related_model is not None
    }
    assert {name: app for name, app in targets.items() if app in HIGHER[layer]} == {}


@pytest.mark.parametrize("layer", sorted(HIGHER))
def test_a_lower_layers_migrations_depend_on_no_higher_app(layer):
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    offenders = {
        f"{app}.{name}": sorted(
            f"{parent[0]}.{parent[1]}"
            for parent in graph.node_map[(app, name)].parents
            if parent[0] in HIGHER[layer]
        )
        for app, name in graph.nodes
        if app == layer
    }
    assert {node: parents for node, parents in offenders.items() if parents} == {}


def test_tools_owns_no_model():
    """A tool execution is a run record (agent.ToolExecution): tools knows nothing of runs."""
    assert list(apps.get_app_config("tools").get_models()) == []


def test_the_loop_knows_no_django():
    assert "django" not in imported_apps(PROJECT_DIR / "agent" / "loop.py")


def test_the_checks_see_what_they_look_for(tmp_path):
    """The checks above would find an arrow back up: they are not vacuous."""
    sample = tmp_path / "models.py"
    sample.write_text('run = models.ForeignKey("agent.AgentRun", on_delete=models.CASCADE)\n')
    assert named_models(sample) == {"agent"}
    assert imported_apps(PROJECT_DIR / "console" / "admin.py") >= {"agent", "memory"}
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    assert ("agent", "0001_initial") in graph.node_map[("agent", "0002_conversations")].parents
    executions = apps.get_model("agent", "ToolExecution")._meta.get_fields()
    assert any(
        field.is_relation and field.related_model.__name__ == "AgentRun" for field in executions
    )
