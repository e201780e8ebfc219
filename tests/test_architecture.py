"""The house's rules, from its imports (scripts/house.py reads them with `ast`): no import
cycle, `app` never imports `devstack`, `compute` never imports `app` (nor `devstack`); a unit's
cluster and Spark host are reached only through its door (app/compute_units/door.py). And each
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


# What lies behind a unit's door: its cluster's backends and handle, and its Spark host's
# transport. Executions, comparisons, maintenance and the console run things on a unit through
# `UnitDoor` only, so none of these is theirs to import.
BEHIND_THE_DOOR = (
    "app.ray_clusters",
    "app.spark_host",
    "app.compute_units.handles",
    "app.compute_units.backends",
)
# The door's own side, and two that read only what a unit may be: the settings' check of the
# listed clusters and local limits (app.config), and the compute units' API offering the kinds
# a user may choose (as their page does).
ON_THE_DOORS_SIDE = ("app.compute_units", "app.ray_clusters", "app.spark_host")
MAY_READ_WHAT_A_UNIT_MAY_BE = {
    ("app.config", "app.ray_clusters.listed"),
    ("app.config", "app.ray_clusters.local_limits"),
    ("app.api.compute_units", "app.compute_units.backends"),
}


def around_the_door(modules) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a module of the portal reaches behind a unit's door."""

    def within(name: str, prefixes: tuple[str, ...]) -> bool:
        return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)

    return sorted(
        (module.name, target)
        for module in modules.values()
        if within(module.name, ("app",)) and not within(module.name, ON_THE_DOORS_SIDE)
        for target in module.imports
        if within(target, BEHIND_THE_DOOR)
        and (module.name, target) not in MAY_READ_WHAT_A_UNIT_MAY_BE
    )


def test_a_unit_is_reached_only_through_its_door(modules):
    assert around_the_door(modules) == []


def test_the_door_check_sees_a_feature_reaching_around_the_door(modules):
    work = modules["app.executions.work"]
    reaching = {
        **modules,
        "app.executions.work": type(work)(
            work.name, work.path, work.lines, work.imports | {"app.ray_clusters.local"}
        ),
    }
    assert around_the_door(reaching) == [("app.executions.work", "app.ray_clusters.local")]


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
