"""TPC-H sample data as a person writes it, in a real browser, against the portal as shipped:
gunicorn with its shipped web workers (gunicorn.conf.py) and the worker process beside them."""

import re
import runpy
import time
import uuid
from pathlib import Path

import httpx
from playwright.sync_api import expect

REPOSITORY = Path(__file__).resolve().parent.parent


def web_worker_pids(stack) -> set[int]:
    """The gunicorn web workers: the children of the portal's master process."""
    master = stack.process("portal").process.pid
    children = set()
    for task in Path(f"/proc/{master}/task").iterdir():
        children |= {int(pid) for pid in (task / "children").read_text().split()}
    return children


def pids_that_answered(stack, path: str) -> dict[int, set[str]]:
    """From the portal's access log (it names the answering pid): pid → statuses given for `path`."""
    answered: dict[int, set[str]] = {}
    for line in (stack.log_dir / "portal.log").read_text(errors="replace").splitlines():
        match = re.search(r'pid=<?(\d+)>? "GET (\S+) [^"]*" (\d{3})', line)
        if match and match.group(2) == path:
            answered.setdefault(int(match.group(1)), set()).add(match.group(3))
    return answered


def test_alice_writes_tpch_sample_data_and_every_web_worker_answers_its_status(
    page, sign_in, portal, stack, fill_warehouse_form
):
    name = f"tpch-{uuid.uuid4().hex[:6]}"
    sign_in("alice")
    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()
    fill_warehouse_form(name)
    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(name)
    warehouse_id = int(page.url.rstrip("/").rsplit("/", 1)[1])

    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("data-sources").click()
    page.locator("#sample-warehouse").select_option(label=name)
    page.get_by_label(re.compile("Scale factor")).fill("0.01")
    page.get_by_test_id("generate-sample").click()
    status = page.locator(f"#sample-status-{warehouse_id}")
    expect(status).to_be_visible()

    # While the worker writes the tables, the status is asked for on fresh connections, which the
    # web workers (as many as the shipped gunicorn.conf.py says) take in turn: every one of them
    # answers it (the job is a database row).
    path = f"/workflows/datasets/sample/{warehouse_id}"
    workers = web_worker_pids(stack)
    assert len(workers) == runpy.run_path(str(REPOSITORY / "gunicorn.conf.py"))["workers"] >= 2
    cookies = {cookie["name"]: cookie["value"] for cookie in page.context.cookies()}
    with httpx.Client(
        base_url=portal,
        cookies=cookies,
        timeout=10,
        headers={"HX-Request": "true", "Connection": "close"},
    ) as outside:
        deadline = time.monotonic() + 60
        while not workers <= pids_that_answered(stack, path).keys() and time.monotonic() < deadline:
            for _ in range(8):
                answer = outside.get(path)
                assert answer.status_code == 200 and name in answer.text
    answered = pids_that_answered(stack, path)
    assert workers <= answered.keys(), f"web workers {workers}, answered by {answered}"
    assert all(statuses == {"200"} for statuses in answered.values()), answered

    expect(status).to_contain_text("done", timeout=180_000)
    expect(status).to_contain_text("tpch.lineitem")
    expect(status).to_contain_text("60,175")
    page.reload()  # any web worker renders the finished job on the page
    expect(page.locator(f"#sample-status-{warehouse_id}")).to_contain_text("done")
