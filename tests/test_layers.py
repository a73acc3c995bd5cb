"""The layers read core -> netguard -> workspace -> sandbox -> tools -> memory -> mcp_servers ->
accounting -> rights -> assistants -> agent -> approvals -> engine -> metrics -> tracing ->
notifications -> {console, chat, accounts, api, identity, sharing}, one way: a lower layer never
imports a higher one, nor names a higher app's model in its schema or its migrations. core, the
loop and its vocabulary, is the bottom: no Django, nothing else of Loop; netguard, the HTTP
policies the model clients and the MCP servers' connections share, no Django either; sandbox,
what runs a snippet, is a plain package too. One HTTP client library: httpx2 (the MCP SDK's),
never httpx."""

import ast
import sys
from pathlib import Path

import pytest
from django.apps import apps
from django.db.migrations.loader import MigrationLoader

pytestmark = pytest.mark.fast

PROJECT_DIR = Path(__file__).resolve().parent.parent
ORDER = [
    "core",
    "netguard",
    "workspace",
    "sandbox",
    "tools",
    "memory",
    "mcp_servers",
    "accounting",
    "rights",
    "assistants",
    "agent",
    "approvals",
    "engine",
    "metrics",
    "tracing",
    "notifications",
]
TOP = {"console", "chat", "accounts", "api", "identity", "sharing"}
LAYERS = [*ORDER, *sorted(TOP)]
HIGHER = {layer: {*ORDER[at + 1 :], *TOP} for at, layer in enumerate(ORDER)}
# The layers that are Django apps: core (the bottom), netguard (Loop's HTTP policies) and sandbox
# (what runs a snippet: it reads Django's settings but has no models, checks or commands of its
# own) are plain packages.
PLAIN = {"core", "netguard", "sandbox"}
APPS = [layer for layer in ORDER if layer not in PLAIN]


def layer_of(module: str) -> str:
    """`core.loop` is in core; `agent.runs` in agent; `sandbox.host` in sandbox."""
    return module.split(".")[0]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            # `from agent import runs` imports agent.runs
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_apps(path: Path) -> set[str]:
    return {layer_of(name) for name in imported_modules(path)} - {""}


def modules(layer: str) -> list[Path]:
    return sorted((PROJECT_DIR / layer).rglob("*.py"))


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


@pytest.mark.parametrize("layer", APPS)
def test_a_lower_layers_schema_points_at_no_higher_app(layer):
    """Every relation of the app's models, as Django sees them (a string target included)."""
    targets = {
        f"{model.__name__}.{field.name}": field.related_model._meta.app_label
        for model in apps.get_app_config(layer).get_models()
        for field in model._meta.get_fields()
        if field.is_relation and field.concrete and field.related_model is not None
    }
    assert {name: app for name, app in targets.items() if app in HIGHER[layer]} == {}


@pytest.mark.parametrize("layer", APPS)
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


def test_the_agent_core_imports_no_django_and_nothing_else_of_loop():
    """Only the standard library and core itself."""
    stdlib = sys.stdlib_module_names
    offenders = {
        str(path.relative_to(PROJECT_DIR)): sorted(
            name
            for name in imported_modules(path)
            if layer_of(name) != "core" and name.split(".")[0] not in stdlib
        )
        for path in modules("core")
    }
    assert len(offenders) >= 10  # the loop, events, history, guards, interrupt, llm, ...
    assert {path: names for path, names in offenders.items() if names} == {}


def test_netguard_imports_no_django_and_nothing_of_loop_but_core():
    offenders = {
        str(path.relative_to(PROJECT_DIR)): sorted(
            name
            for name in imported_modules(path)
            if layer_of(name) in {*LAYERS, "django", "loopsite"} - PLAIN
        )
        for path in modules("netguard")
    }
    assert len(offenders) >= 3  # the package, its two policies, what they hold bodies to
    assert {path: names for path, names in offenders.items() if names} == {}


def test_no_module_of_loop_imports_httpx_but_httpx2():
    """One HTTP client library, the one the MCP SDK needs (declared in requirements.in): the
    product, its tests and its benchmarks import httpx2, never httpx (it may still be installed,
    for a dependency's sake)."""
    tops = [
        top
        for top in PROJECT_DIR.iterdir()
        if top.is_dir() and top.name[0] not in "._" and top.name != "var"  # var: people's files
    ]
    paths = [*PROJECT_DIR.glob("*.py"), *(path for top in tops for path in top.rglob("*.py"))]
    naming = [path for path in paths if "httpx" in path.read_text()]  # parsing all takes seconds
    offenders = {
        str(path.relative_to(PROJECT_DIR))
        for path in naming
        if any(layer_of(name) == "httpx" for name in imported_modules(path))
    }
    assert len(naming) >= 10  # the model clients, the SSRF policy, the MCP client, their tests
    assert offenders == set()


def test_the_workspace_owns_no_model():
    """A workspace is a directory: what a person keeps there is files, not rows."""
    assert list(apps.get_app_config("workspace").get_models()) == []


def test_the_engine_owns_no_model():
    """A worker's records are agent's runs: the engine only works them."""
    assert list(apps.get_app_config("engine").get_models()) == []


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
