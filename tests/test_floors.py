"""The package's floor plan: every import, function-level ones included, points down a floor or
stays inside its own folder, and nothing imports in a circle. A new upward arrow fails here
with the line that made it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "puffer"

# From the ground up. A module may import its own floor's modules and any floor below.
FLOORS = [
    ["errors", "renamed"],
    ["config"],
    ["emulation", "runtime", "loggers"],
    ["vector", "envs", "policies", "files"],
    ["monitor", "report"],
    ["training"],
    ["evaluation"],
    ["build", "frameworks", "models"],
    ["agent"],
    ["export"],
    ["run"],
    ["batch"],
    ["cli"],
    # "": the package's own __init__, the front door; plugins: Hydra's namespace (the launcher's class)
    ["__main__", "", "plugins"],
]
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def room(module: str) -> str:
    """puffer.training.ppo -> training; puffer -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    parts = ["puffer", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported puffer module) for every import in the file, at any depth."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") if is_module(f"{base}.{alias.name}")
                      else (node.lineno, base) for alias in node.names]
    return [(line, name) for line, name in found if name == "puffer" or name.startswith("puffer.")]


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "conf" not in p.relative_to(PACKAGE).parts[:1])


def test_every_folder_of_the_package_has_a_floor():
    rooms = {room(module_name(p)) for p in sources()}
    assert rooms <= set(FLOOR), f"put {sorted(rooms - set(FLOOR))} on a floor in FLOORS"


def test_no_import_points_up_a_floor():
    upward = []
    for path in sources():
        here = room(module_name(path))
        for line, name in imports(path):
            there = room(name)
            if name == "puffer":  # `import puffer` for __version__ runs only the front door's setup
                continue
            if there != here and FLOOR[there] >= FLOOR[here]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name} "
                              f"({there or 'puffer'} is not below {here or 'puffer'})")
    assert not upward, "\n".join(upward)


def test_no_import_circle_between_modules():
    graph = {module_name(p): {name for _, name in imports(p) if name != "puffer"} for p in sources()}
    # a package's __init__ re-exporting its own modules is the package's front, not a circle
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not (t in graph and name.startswith(t + "."))}
    done, stack, circles = set(), [], []

    def visit(node):
        if node in stack:
            circles.append(" -> ".join(stack[stack.index(node):] + [node]))
            return
        if node in done or node not in graph:
            return
        stack.append(node)
        for target in sorted(graph[node]):
            visit(target)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert not circles, "\n".join(circles)


@pytest.mark.parametrize("path, name", [
    ("puffer.emulation", "GymnasiumPufferEnv"), ("puffer.emulation", "PettingZooPufferEnv"),
    ("puffer.vector", "make"), ("puffer.vector", "Serial"), ("puffer.vector", "Multiprocessing"),
    ("puffer.models", "Default"), ("puffer.frameworks.cleanrl", "train"), ("puffer.frameworks.cleanrl", "Config"),
])
def test_the_seed_apis_paths_stay_importable(path, name):
    import importlib

    assert callable(getattr(importlib.import_module(path), name))


def test_the_readmes_tree_names_every_folder_and_floor():
    import re

    readme = (PACKAGE.parent / "README.md").read_text()
    tree = re.search(r"```\npuffer/\n(.*?)```", readme, flags=re.S).group(1)
    named = {word.rstrip("/").removesuffix(".py") for line in tree.splitlines()
             for word in line.split()[:2] if word.endswith(("/", ".py"))}
    rooms = {room(module_name(p)) for p in sources()} - {"", "models"}  # the front door; a seed-API alias
    assert rooms <= named, f"the README's tree lacks {sorted(rooms - named)}"
