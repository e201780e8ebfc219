"""The test suite's own layout: shared helpers live in helper modules (tests/factories.py and
its siblings) and shared fixtures in conftest.py, so no test module imports from another test
module or from a conftest (pytest loads those itself)."""

from __future__ import annotations

import ast

from app.config import PROJECT_ROOT


def imported_modules(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_a_test_module_or_a_conftest():
    wrong = {}
    for folder in ("tests", "e2e"):
        for path in sorted((PROJECT_ROOT / folder).glob("*.py")):
            names = {
                name
                for name in imported_modules(path)
                if name.split(".")[0] in ("tests", "e2e")
                and name.split(".")[-1].startswith(("test_", "conftest"))
            }
            if names:
                wrong[f"{folder}/{path.name}"] = sorted(names)
    assert wrong == {}, "move what they share to tests/factories.py (helpers) or conftest.py"


def test_the_layout_check_finds_an_import_from_a_test_module(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text("from tests.test_executions import make_user\nimport e2e.conftest\n")
    assert imported_modules(module) == {"tests.test_executions", "e2e.conftest"}
