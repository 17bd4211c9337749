"""The package's layers hold (docs/architecture.md): read from the code's own imports.

The pure core imports no Redis client and no Pykka, however deep its imports go inside the
package; the Redis layer knows nothing of the actors or the command line; the actors know nothing
of the command line. Imports are read with ``ast``, so nothing is imported to check them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "actors"
PURE = [
    "actors.lifecycle",
    "actors.model",
    "actors.replay",
    "actors.producing",
    "actors.values",
    "actors.job",
    "actors.errors",
    "actors._validation",
    "actors._constants",
    "actors.storage.calls",
    "actors.storage.codec",
    "actors.storage.keys",
]


def module_path(name: str) -> Path:
    relative = Path(*name.split(".")[1:])
    file = PACKAGE / relative.with_suffix(".py")
    return file if file.exists() else PACKAGE / relative / "__init__.py"


def direct_imports(name: str) -> set[str]:
    """Modules ``name`` imports: package modules by their full name, others by top-level name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module_path(name).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "actors":
                found.add(node.module.split(".")[0])
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if module_path(submodule).exists() else node.module)
    return found


def reachable(name: str) -> tuple[set[str], set[str]]:
    """(package modules, outside top-level modules) reachable from ``name`` by imports."""
    inside: set[str] = set()
    outside: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in inside:
            continue
        inside.add(current)
        for imported in direct_imports(current):
            if imported == "actors":
                continue  # the package's face re-exports; the core never imports it
            if imported.startswith("actors."):
                todo.append(imported)
            else:
                outside.add(imported)
    return inside, outside


@pytest.mark.parametrize("name", PURE)
def test_the_pure_core_pulls_in_no_redis_and_no_pykka(name: str) -> None:
    _, outside = reachable(name)
    assert not outside & {"redis", "pykka", "hiredis"}, name


def test_the_relative_imports_are_gone() -> None:
    """Every import inside the package is absolute, so the checks above see all of them."""
    for file in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{file}: relative import of {node.module}"


def _modules_of(layer: str) -> list[str]:
    return [
        "actors." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
        for p in sorted((PACKAGE / layer).glob("*.py"))
        if p.stem not in ("__init__", "__main__")
    ]


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [("storage", ("actors.runtime", "actors.cli", "actors.queue")), ("runtime", ("actors.cli",))],
)
def test_a_lower_layer_never_imports_a_higher_one(layer: str, forbidden: tuple[str, ...]) -> None:
    for name in _modules_of(layer):
        for imported in direct_imports(name):
            assert not imported.startswith(forbidden), f"{name} imports {imported}"
