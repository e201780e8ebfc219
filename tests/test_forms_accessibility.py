"""Every form's help text and error messages are attached to their field with aria-describedby,
so a screen reader reads them with the field (and every reference points at an element)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from tests.factories import csrf, equipped


class _Form(HTMLParser):
    """Ids, aria-describedby references, and the help/error <small>s inside forms (those inside
    a <label> are part of the field's name already)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.described_by: set[str] = set()
        self.smalls: list[
            dict
        ] = []  # {"ids" (its own, its <div>s'), "text"} of each <small> in a form
        self._forms = 0
        self._labels = 0
        self._divs: list[str | None] = []  # the ids of the open <div>s
        self._small: dict | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        self.described_by.update((attributes.get("aria-describedby") or "").split())
        if tag == "form":
            self._forms += 1
        elif tag == "label":
            self._labels += 1
        elif tag == "div":
            self._divs.append(attributes.get("id"))
        elif tag == "small" and self._forms and not self._labels and self._small is None:
            # A message in a described container (a step's errors) is attached through it.
            self._small = {"ids": {attributes.get("id"), *self._divs} - {None}, "text": ""}

    def handle_endtag(self, tag):
        if tag == "form":
            self._forms -= 1
        elif tag == "label":
            self._labels -= 1
        elif tag == "div" and self._divs:
            self._divs.pop()
        elif tag == "small" and self._small is not None:
            self.smalls.append(self._small)
            self._small = None

    def handle_data(self, data):
        if self._small is not None:
            self._small["text"] += data


def unattached(page: str) -> list[str]:
    """What is wrong with the page's help text: texts without a field, references to nothing."""
    parsed = _Form()
    parsed.feed(page)
    problems = [
        f"not attached: {small['text'].strip()!r}"
        for small in parsed.smalls
        if small["text"].strip() and not small["ids"] & parsed.described_by
    ]
    problems += [
        f"aria-describedby points at nothing: {ref}" for ref in parsed.described_by - parsed.ids
    ]
    return problems


def test_help_text_and_errors_are_attached_to_their_fields(client, newcomer, db_engine):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    pages = {
        path: client.get(path)
        for path in (
            "/compute-units/new",
            "/workflows/new",
            "/warehouses/new",
            "/workflows/datasets",
            f"/executions/new?workflow_id={workflow.id}",
            f"/workflows/{workflow.id}/edit",
            f"/warehouses/{warehouse.id}",
        )
    }
    token = csrf(client)
    # The same forms with their errors showing.
    pages["compute unit errors"] = client.post(
        "/compute-units/",
        data={
            "name": "",
            "kind": "local",
            "cpus": "999",
            "memory_gb": "x",
            "worker_nodes": "-1",
            "csrf_token": token,
        },
    )
    pages["workflow errors"] = client.post("/workflows/", data={"name": "", "csrf_token": token})
    pages["upload errors"] = client.post(
        "/workflows/datasets/upload", data={"table_name": "Bad Name!", "csrf_token": token}
    )
    pages["step errors"] = client.post(
        f"/workflows/{workflow.id}/edit",
        data={
            "base_version": "1",
            "steps-0-name": "Bad name",
            "steps-0-kind": "sql",
            "steps-0-code": "SELEC 1",
            "csrf_token": token,
        },
    )
    pages["rename errors"] = client.post(
        f"/warehouses/{warehouse.id}/rename", data={"name": "Not OK!", "csrf_token": token}
    )
    pages["retention errors"] = client.post(
        f"/warehouses/{warehouse.id}/retention",
        data={"results_mode": "days", "results_value": "x", "logs_days": "-3", "csrf_token": token},
    )
    for name, response in pages.items():
        page = response.get_data(as_text=True)
        assert response.status_code in (200, 422), (name, response.status_code)
        if name != "/workflows/new":  # the only form here with no help text until it has errors
            assert re.search(r'aria-describedby="[^"]+"', page), f"{name}: no field is described"
        assert not unattached(page), f"{name}: {unattached(page)}"
