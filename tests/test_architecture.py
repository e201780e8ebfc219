"""The house's rules, from its imports (scripts/house.py reads them with `ast`): no import
cycle, `app` never imports `devstack`, `compute` never imports `app` (nor `devstack`). And each
package's docstring is its map: one line per module and subpackage, each of which exists. Long
modules and functions are warnings that `python scripts/house.py` prints, not rules: a module is
split by meaning, not by a count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scripts.house import ROOT, cycles, read_modules, wrong_way


@pytest.fixture(scope="module")
def modules():
    return read_modules()


def test_no_import_cycle(modules):
    assert cycles(modules) == []


def test_no_import_runs_the_wrong_way(modules):
    assert wrong_way(modules) == []


def test_the_rules_catch_what_they_are_for(modules, tmp_path):
    """The walk itself: a cycle and a wrong-way import made on purpose are found."""
    from scripts import house

    first, second = modules["app.leases"], modules["app.worker"]
    looped = {
        **modules,
        "app.leases": type(first)(
            first.name, first.path, first.lines, first.imports | {"app.worker"}
        ),
        "compute.jars": type(second)("compute.jars", second.path, 1, {"app.db"}),
    }
    assert any({"app.leases", "app.worker"} <= set(group) for group in house.cycles(looped))
    assert ("compute.jars", "app.db") in house.wrong_way(looped)


# The packages whose docstrings are their map, and folders inside them that hold no Python
# package (static files, Java sources, caches).
MAPPED = ("app", "compute", "devstack", "lakeport_client", "bench")
NOT_PACKAGES = {"__pycache__", "static", "java", "node_modules"}
# One line of a package's map: "- `name.py` — role" for a module, "- `name/` — role" for a
# subpackage.
MAP_LINE = re.compile(r"^\s*- `(\w+)(\.py|/)` — \S", re.MULTILINE)


def python_folders() -> list[Path]:
    """Every folder under the mapped roots that holds Python: each must be a package."""
    folders = set()
    for root in MAPPED:
        for path in (ROOT / root).rglob("*.py"):
            if NOT_PACKAGES.isdisjoint(path.relative_to(ROOT).parts):
                folders.add(path.parent)
    return sorted(folders)


def package_map(folder: Path) -> set[str]:
    """What a package's docstring names as its modules (`x.py`) and subpackages (`x/`)."""
    init = folder / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text())) if init.is_file() else None
    return {name + kind for name, kind in MAP_LINE.findall(docstring or "")}


def package_contents(folder: Path) -> set[str]:
    modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    subpackages = {
        f"{p.name}/"
        for p in folder.iterdir()
        if p.is_dir() and p.name not in NOT_PACKAGES and any(p.rglob("*.py"))
    }
    return modules | subpackages


def test_every_package_docstring_names_each_of_its_modules():
    missing = {}
    for folder in python_folders():
        unnamed = package_contents(folder) - package_map(folder)
        if unnamed:
            missing[str(folder.relative_to(ROOT))] = sorted(unnamed)
    assert missing == {}, "add a line `- `name.py` — role` for each to the package's docstring"


def test_every_module_a_package_docstring_names_exists():
    stale = {}
    for folder in python_folders():
        gone = package_map(folder) - package_contents(folder)
        if gone:
            stale[str(folder.relative_to(ROOT))] = sorted(gone)
    assert stale == {}, "these are named in the package's docstring but are not in the package"


def test_the_map_check_sees_a_missing_and_a_stale_line(tmp_path):
    """The parsing itself: a module left out and a line naming nothing are both found."""
    (tmp_path / "__init__.py").write_text(
        '"""A package.\n\n- `kept.py` — stays\n- `gone.py` — moved away\n- `sub/` — below\n"""\n'
    )
    (tmp_path / "kept.py").write_text("")
    (tmp_path / "new.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert package_map(tmp_path) == {"kept.py", "gone.py", "sub/"}
    assert package_contents(tmp_path) - package_map(tmp_path) == {"new.py"}
    assert package_map(tmp_path) - package_contents(tmp_path) == {"gone.py"}
