"""The guide: README stays short and points into docs/, docs/configuration.md is the settings
table as app/config.py holds it, and every document a text names exists."""

from __future__ import annotations

import re
from pathlib import Path

from app.config import SETTINGS, Setting
from scripts import configuration_doc
from scripts.house import ROOT

README = ROOT / "README.md"
# Texts that name documents: the guide itself and the code that points readers at it.
CITING = ("README.md", "docs", "bench", "deploy", "app", "compute", "devstack", "scripts", "tests")


def test_the_configuration_page_is_the_settings_table():
    assert (ROOT / "docs" / "configuration.md").read_text() == configuration_doc.render(), (
        "regenerate with: .venv/bin/python scripts/configuration_doc.py"
    )


def test_the_configuration_page_names_every_setting_with_its_default():
    page = configuration_doc.render()
    for setting in SETTINGS.values():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{setting.env}` |"))
        if setting.default is None:
            assert "*(required)*" in row
        elif setting.default != "" and "var/lakeport.db" not in str(setting.default):
            assert f"`{setting.default}`" in row


def test_the_check_fails_when_the_table_changes(monkeypatch):
    assert configuration_doc.main(["--check"]) == 0
    added = Setting("LAKEPORT_NOT_DOCUMENTED_YET", "1", help="A setting added after the page.")
    monkeypatch.setitem(SETTINGS, "NOT_DOCUMENTED_YET", added)
    assert configuration_doc.main(["--check"]) == 1


def test_the_readme_is_short_and_keeps_the_two_commands():
    text = README.read_text()
    assert len(text.encode()) < 12 * 1024
    assert "make run" in text and "make test" in text  # .ci/run runs the README's `make test`


def test_the_readme_map_has_a_row_for_every_package():
    packages = {
        init.parent
        for top in ("app", "compute", "devstack", "lakeport_client", "bench")
        for init in (ROOT / top).rglob("__init__.py")
    }
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `")]
    missing = []
    for folder in sorted(packages):
        name = f"`{folder.relative_to(ROOT)}/`"
        if not any(name in row.split(" | ")[0] for row in rows):
            missing.append(name)
    assert missing == [], "add a row to README's map, Where things are"


def test_the_readme_links_to_every_document_in_docs():
    text = README.read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, page.name


def cited_documents() -> set[tuple[str, str]]:
    """(text, document) for each `docs/….md` or `bench/….md` path a text names."""
    cited = set()
    for top in CITING:
        paths = [ROOT / top] if top.endswith(".md") else (ROOT / top).rglob("*")
        for path in paths:
            if path.suffix not in {".md", ".py"} or "__pycache__" in path.parts:
                continue
            for document in re.findall(
                r"(?<![\w/.-])((?:docs|bench)/[\w.-]+\.md)\b", path.read_text()
            ):
                cited.add((str(path.relative_to(ROOT)), document))
    return cited


def test_every_document_a_text_names_exists():
    missing = sorted((text, doc) for text, doc in cited_documents() if not (ROOT / doc).is_file())
    assert missing == []


def test_no_text_points_at_readme_sections_that_moved():
    """README lost its module table, its settings table and its topic sections to docs/."""
    stale = re.compile(
        r"(?:the main README|README's\s+(?:Architecture|configuration|Configuration)\s+"
        r"(?:table|section|reference))"
    )
    pointing = []
    for top in CITING:
        paths = [ROOT / top] if top.endswith(".md") else (ROOT / top).rglob("*")
        for path in paths:
            if path.suffix in {".md", ".py", ".yaml"} and "__pycache__" not in path.parts:
                if path != Path(__file__) and stale.search(path.read_text()):
                    pointing.append(str(path.relative_to(ROOT)))
    assert pointing == []


# The guide: what a reader takes as current (bench/RESULTS.md is a log, and names what was).
GUIDE = ("README.md", "docs", "bench/README.md")
CODE_PATH = re.compile(
    r"(?<![\w/.-])((?:app|compute|devstack|lakeport_client|bench|scripts|tests|e2e)/[\w/]+\.py)\b"
)
# `compute/run/pipeline.Pipeline` or `compute.run.pipeline.Pipeline`: a module and a name in it.
SLASHED_NAME = re.compile(r"`((?:app|compute|devstack)/[\w/]+)\.(\w+)`")
DOTTED_NAME = re.compile(r"`((?:app|compute|devstack|bench)(?:\.\w+)+)`")


def guide_pages() -> list:
    pages = []
    for top in GUIDE:
        pages += [ROOT / top] if top.endswith(".md") else sorted((ROOT / top).glob("*.md"))
    return pages


def defines(module, name: str) -> bool:
    return bool(
        re.search(
            rf"^\s*(?:async def|def|class)\s+{name}\b|^\s*{name}\s*[:=]", module.read_text(), re.M
        )
    )


def stale_names(text: str) -> list[str]:
    stale = [path for path in CODE_PATH.findall(text) if not (ROOT / path).is_file()]
    for module, name in SLASHED_NAME.findall(text):
        path = ROOT / f"{module}.py"
        if name in {"md", "mjs", "java", "yaml", "sql", "html", "sh", "js", "css"}:  # a file
            if not (ROOT / f"{module}.{name}").is_file():
                stale.append(f"{module}.{name}")
        elif name != "py" and (not path.is_file() or not defines(path, name)):
            stale.append(f"{module}.{name}")
    for dotted in DOTTED_NAME.findall(text):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            path = ROOT.joinpath(*parts[:cut]).with_suffix(".py")
            if path.is_file():
                if cut < len(parts) and not defines(path, parts[cut]):
                    stale.append(dotted)
                break
            if cut == len(parts) and ROOT.joinpath(*parts).is_dir():
                break
        else:
            stale.append(dotted)
    return stale


def test_every_module_and_name_the_guide_cites_exists():
    stale = {}
    for page in guide_pages():
        found = stale_names(page.read_text())
        if found:
            stale[str(page.relative_to(ROOT))] = sorted(set(found))
    assert stale == {}, "the guide names modules or names that moved: follow them"


def test_the_citation_check_sees_a_moved_module_and_a_renamed_name():
    text = (
        "`compute/run/pipeline.py`, `compute/pipeline.py`, `app.config.SETTINGS`, `app.config.GONE`"
        ", `app/static/js/lakeport.js`, `app/static/js/gone.js`"
    )
    assert stale_names(text) == ["compute/pipeline.py", "app/static/js/gone.js", "app.config.GONE"]
