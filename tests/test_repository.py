"""A fresh clone is self-contained: nothing the project builds, tests or runs reaches outside it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# What a checkout holds but the repository does not (installed, generated or ignored).
NOT_THE_PROJECTS = {
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    ".cache",
    "var",
    "test-artifacts",
    "instance",
    "vendor",
}
# A folder beside the checkout: by relative or absolute path, or joined as a Path segment.
# Spelt in pieces so this file does not match itself.
OUTSIDE = re.compile(r"\.\.[/\\]shared\b|[/]shared[/]|[/]work[/]shared\b|/\s*[\"']shared[\"']")


def project_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if any(part in NOT_THE_PROJECTS for part in relative.parts) or not path.is_file():
            continue
        files.append(path)
    return files


def test_no_project_file_reaches_beside_the_checkout():
    offenders = []
    for path in project_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images, jars) name no paths
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not offenders, "files that read outside the repository:\n" + "\n".join(offenders)


def test_the_pattern_catches_references_outside():
    name = "shared"  # assembled, so this file does not match itself
    for line in (
        f'CRD = Path(__file__).parents[2] / "{name}" / "kuberay"',
        f"see ../{name}/STACK.md",
        f"open('/work/{name}/kuberay/ray.io_rayclusters.yaml')",
        f"cp ..\\{name}\\a b",
    ):
        assert OUTSIDE.search(line), line
    for line in ("a shared cluster", "shared-name", "compute/shared_memory.py"):
        assert not OUTSIDE.search(line), line


def test_the_vendored_specs_are_there_with_their_licence():
    specs = ROOT / "tests" / "specs"
    assert "Apache License" in (specs / "LICENSE-Apache-2.0").read_text()
    for folder, files in {
        "lakekeeper": ("management-open-api.yaml", "rest-catalog-open-api.yaml"),
        "kuberay": ("ray.io_rayclusters.yaml",),
    }.items():
        assert "Apache License 2.0" in (specs / folder / "README.md").read_text()
        for name in files:
            document = yaml.safe_load((specs / folder / name).read_text())
            assert document.get("openapi") or document.get("kind") == "CustomResourceDefinition", (
                name
            )


def test_the_portals_packages_import_each_other_without_a_ring():
    """Feature packages depend one way (warehouses ↛ executions: a signal, app/signals.py)."""
    import ast

    graph: dict[str, set[str]] = {}
    for path in (ROOT / "app").rglob("*.py"):
        source = path.relative_to(ROOT / "app").parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app."):
                target = node.module.split(".")[1]
                if target != source:
                    graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph.get(start, ())
        )

    rings = sorted(package for package in graph if reaches(package, package, {package}))
    assert rings == [], f"packages in an import ring: {rings}"


def test_every_benchmark_module_imports():
    """`make bench` is run by hand, not by the suite: a module moved in app/ must not break it unseen."""
    import importlib

    for path in sorted((ROOT / "bench").glob("*.py")):
        importlib.import_module(f"bench.{path.stem}")
