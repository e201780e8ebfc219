"""The patches of third-party internals (compute/third_party_patches.py): each is guarded by the
pinned versions and fails loudly when a pin moves; each still finds what it patches; no other
module of `compute/` patches a third-party module. No Spark, no Ray cluster."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from compute import third_party_patches as patches
from compute.third_party_patches import PINS, Target, UnpinnedVersion

ROOT = Path(__file__).resolve().parent.parent
THIRD_PARTY = ("ray", "raydp", "pyspark", "py4j")


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["dependencies"]:
        if found := re.fullmatch(r"([\w-]+)(?:\[[\w,]+\])?==([\w.]+)", requirement):
            pins[found[1]] = found[2]
    return pins


def test_the_pins_are_those_of_pyproject_pysparks_own_and_the_compute_image():
    pyproject = _pyproject_pins()
    image = (ROOT / "compute" / "Dockerfile").read_text()
    for distribution in ("ray", "raydp", "pyspark"):
        assert PINS[distribution] == pyproject[distribution], distribution
        assert re.search(rf'"{distribution}(\[\w+\])?=={re.escape(PINS[distribution])}"', image)
    # py4j is pinned by pyspark itself.
    assert f"py4j=={PINS['py4j']}" in importlib.metadata.requires("pyspark")


def test_the_installed_versions_are_the_pinned_ones():
    patches.require_pinned(*PINS)


def test_a_moved_pin_fails_loudly_before_anything_is_patched(monkeypatch):
    import ray._private.services as ray_services
    import raydp.context

    moved = {**{name: PINS[name] for name in PINS}, "ray": "2.61.0", "raydp": "1.7.0"}
    monkeypatch.setattr(patches, "installed_version", moved.get)
    with pytest.raises(UnpinnedVersion) as refused:
        patches.require_pinned("ray")
    assert str(refused.value).startswith(
        "compute/third_party_patches.py patches internals of ray==2.60.0, but 2.61.0 is installed"
    )

    start_ray_process, spark_context = ray_services.start_ray_process, raydp.context._SparkContext
    with pytest.raises(UnpinnedVersion, match="ray==2.60.0"):
        patches.start_ray_node_lean(dashboard_modules=(), agent_command=None, spawn_reaper=True)
    with pytest.raises(UnpinnedVersion, match="raydp==1.6.5"):
        patches.run_raydp_app_master_in_the_driver(lambda: "", lambda: None)
    assert ray_services.start_ray_process is start_ray_process
    assert raydp.context._SparkContext is spark_context

    monkeypatch.setattr(patches, "installed_version", {**moved, "py4j": None}.get)
    with pytest.raises(UnpinnedVersion, match="py4j==0.10.9.7, but it is not installed"):
        patches.fresh_py4j_client_after_fork(spark=None)


def test_every_patch_still_finds_what_it_patches():
    assert patches.missing_targets() == []


def test_the_target_check_sees_a_module_an_attribute_a_parameter_and_a_field_gone(monkeypatch):
    monkeypatch.setattr(
        patches,
        "TARGETS",
        (
            Target("ray", "ray._private.no_such_module", "Node"),
            Target("ray", "ray._private.node", "Node.no_such_method"),
            Target("ray", "ray._private.node", "Node.start_api_server", ("no_such_parameter",)),
            Target("py4j", "py4j.java_gateway", "GatewayClient.__init__", sets=("no_such_field",)),
            Target("py4j", "py4j.java_gateway", "GatewayClient.__init__", sets=("deque",)),
        ),
    )
    missing = patches.missing_targets()
    assert [line.split(":")[0] for line in missing] == [
        "ray._private.no_such_module.Node",
        "ray._private.node.Node.no_such_method",
        "ray._private.node.Node.start_api_server",
        "py4j.java_gateway.GatewayClient.__init__",
    ]
    assert missing[2].endswith("no parameter no_such_parameter")
    assert missing[3].endswith("sets no no_such_field")


def _patches_of_third_party_modules(source: str) -> list[int]:
    """Lines that assign to an attribute of a third-party module (or of something imported from
    one), set one with `setattr`, or put a module into `sys.modules`."""
    tree = ast.parse(source)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in THIRD_PARTY:
                    imported.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in THIRD_PARTY:
            imported.update(alias.asname or alias.name for alias in node.names)

    def root(node: ast.AST) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and root(target) in imported:
                lines.append(node.lineno)
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules":
                lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and root(node.args[0]) in imported
        ):
            lines.append(node.lineno)
    return lines


def test_no_other_module_of_compute_patches_a_third_party_module():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "compute").rglob("*.py"))
        if path.name != "third_party_patches.py"
        and (lines := _patches_of_third_party_modules(path.read_text()))
    }
    assert found == {}
    # The scan finds this module's own patches.
    assert len(_patches_of_third_party_modules(Path(patches.__file__).read_text())) >= 6
