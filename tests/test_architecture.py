"""The house's rules, from its imports (scripts/house.py reads them with `ast`): no import
cycle, `app` never imports `devstack`, `compute` never imports `app` (nor `devstack`); and
README's Architecture section names every module. Long modules and functions are warnings that
`python scripts/house.py` prints, not rules: a module is split by meaning, not by a count."""

from __future__ import annotations

import re

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


def architecture_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]


def test_the_architecture_section_names_every_module(modules):
    rows = [line for line in architecture_section().splitlines() if line.startswith("|")]
    missing = []
    for module in modules.values():
        path = module.path.relative_to(ROOT)
        if path.name == "__init__.py" and module.lines < 40:
            continue  # a package's marker and its re-exports
        folder = f"{path.parent}/"
        named = str(path) in architecture_section() or any(
            f"`{path.name}`" in row and folder in row for row in rows
        )
        if not named:
            missing.append(str(path))
    assert missing == [], "add these to README's Architecture table"


def test_the_module_paths_the_section_names_exist():
    for path in re.findall(r"`((?:app|compute|devstack)/[\w/]+\.py)`", architecture_section()):
        assert (ROOT / path).is_file(), path
