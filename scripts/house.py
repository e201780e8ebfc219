"""The house from its imports: `python scripts/house.py` prints Lakeport's modules, the import
cycles among them, the arrows that run the wrong way, and the longest modules and functions.

Read with Python's `ast`, nothing is imported or run. tests/test_architecture.py holds the
rules it reports on: no cycle, `app` never imports `devstack`, `compute` never imports `app`,
the client (`lakeport_client`) imports none of them.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "compute", "devstack", "lakeport_client")
# Imports that would run the wrong way: (importer package, imported package). The client speaks
# to a portal over HTTP only.
FORBIDDEN = {
    ("app", "devstack"),
    ("compute", "app"),
    ("compute", "devstack"),
    ("lakeport_client", "app"),
    ("lakeport_client", "compute"),
    ("lakeport_client", "devstack"),
}


# Past these a module or function is worth a look: is it one role or two? Warnings, not rules;
# a split follows meaning, not a count.
LONG_MODULE_LINES = 600
LONG_FUNCTION_LINES = 60


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    functions: list[tuple[str, int]] = field(default_factory=list)  # (qualified name, lines)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _functions(tree: ast.AST) -> list[tuple[str, int]]:
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child.end_lineno - child.lineno + 1))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def read_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            tree = ast.parse(text, str(path))
            name = module_name(path)
            module = Module(name, path, len(text.splitlines()), functions=_functions(tree))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    module.imports.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    target = _resolve(node, name, path.name == "__init__.py")
                    # `from package import module` is an arrow to the module; `from module
                    # import name`, to the module (resolved below, once all modules are known).
                    module.imports.update(f"{target}:{alias.name}" for alias in node.names)
            modules[name] = module
    for module in modules.values():  # keep only imports of project modules, by their module
        resolved = set()
        for target in module.imports:
            base, _, member = target.partition(":")
            resolved.add(f"{base}.{member}" if member and f"{base}.{member}" in modules else base)
        # A module's arrow to its own package (a blueprint's routes taking `bp` from the package,
        # as microblog does) is not counted: Python runs the package first whatever is imported.
        module.imports = {
            target
            for target in resolved
            if target in modules
            and target != module.name
            and not module.name.startswith(target + ".")
        }
    return modules


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(modules[name].imports):
            if target not in index:
                connect(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for name in sorted(modules):
        if name not in index:
            connect(name)
    return found


def wrong_way(modules: dict[str, Module]) -> list[tuple[str, str]]:
    return sorted(
        (module.name, target)
        for module in modules.values()
        for target in module.imports
        if (module.name.split(".")[0], target.split(".")[0]) in FORBIDDEN
    )


def main() -> int:
    modules = read_modules()
    lines = {
        package: sum(m.lines for m in modules.values() if m.name.split(".")[0] == package)
        for package in PACKAGES
    }
    print(
        f"{len(modules)} modules: "
        + ", ".join(f"{package} {lines[package]:,} lines" for package in PACKAGES)
    )
    found = cycles(modules)
    print(f"\nimport cycles: {len(found)}")
    for group in found:
        print("  " + " <-> ".join(group))
    arrows = wrong_way(modules)
    print(f"\nimports that run the wrong way: {len(arrows)}")
    for importer, target in arrows:
        print(f"  {importer} -> {target}")
    print("\nlongest modules:")
    for module in sorted(modules.values(), key=lambda m: -m.lines)[:8]:
        print(f"  {module.lines:5} {module.path.relative_to(ROOT)}")
    over = [m for m in modules.values() if m.lines > LONG_MODULE_LINES]
    print(f"\nwarning: modules over {LONG_MODULE_LINES} lines: {len(over)}")
    for module in sorted(over, key=lambda m: -m.lines):
        print(f"  {module.lines:5} {module.path.relative_to(ROOT)}")
    long_functions = sorted(
        (
            (lines, f"{module.name}.{name}")
            for module in modules.values()
            for name, lines in module.functions
            if lines > LONG_FUNCTION_LINES
        ),
        reverse=True,
    )
    print(f"\nwarning: functions over {LONG_FUNCTION_LINES} lines: {len(long_functions)}")
    for count, name in long_functions:
        print(f"  {count:5} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
