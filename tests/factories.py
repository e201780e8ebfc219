"""Plain helpers the test modules share: rows, users and sign-ins, workflows, warehouses, units and
executions made for a test, and the portal's forms and pages as a test drives them. Stand-ins for
what the portal talks to are in tests/stand_ins.py, helpers for tests on catalogs directly in
tests/catalogs.py, the deployment's files as tests read them in tests/deploy_files.py, and
fixtures in tests/conftest.py; a test module imports from these, never from another test module.

Most helpers take the test database's engine (`db_engine`) and write through a session of their
own, as the worker or another process would. Feature modules are imported where they are used:
one that does not import fails the tests that use it, not the collection of every test.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import httpx
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from pyiceberg.catalog import load_catalog
from sqlmodel import Session, select

from app.config import Config as PortalConfig
from app.models import (
    ComputeUnit,
    ComputeUnitEvent,
    Execution,
    Notification,
    Schedule,
    ScheduledRun,
    User,
    Warehouse,
    Workflow,
    WorkflowVersion,
)
from devstack.oidc_provider import login_via_form, sign_in_portal_client
from devstack.seaweedfs import TEST_USER_KEYS
from tests.services import known_test_subject


def lakehouse_config(portal_config: PortalConfig, lakehouse, **settings) -> PortalConfig:
    """The portal on the dev catalog and SeaweedFS, its units bounded to 2 CPUs, 4 GB and one
    worker node; `settings` on top."""
    return replace(
        portal_config,
        LAKEKEEPER_URL=lakehouse.catalog_url,
        CU_MAX_CPUS=2,
        CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
        CU_MAX_MEMORY_GB=4.0,
        CU_MAX_WORKERS=1,
        **settings,
    )


# --------------------------------------------------------------------------- rows and users
ONE_SQL_STEP = [
    {
        "name": "doubled",
        "kind": "sql",
        "code": "SELECT id, id * 2 AS twice FROM range(0, 130)",
        "output": True,
    }
]


def add(db_engine, *rows):
    with Session(db_engine, expire_on_commit=False) as db:
        for row in rows:
            db.add(row)
        db.commit()
        for row in rows:
            db.refresh(row)
    return rows[0] if len(rows) == 1 else rows


def reload(db_engine, model, row_id):
    with Session(db_engine) as db:
        return db.get(model, row_id)


def update_row(db_engine, model, row_id, **values) -> None:
    """Set `values` on a row, as the worker or another process would."""
    with Session(db_engine) as db:
        row = db.get(model, row_id)
        for name, value in values.items():
            setattr(row, name, value)
        db.add(row)
        db.commit()


def make_user(db_engine) -> User:
    subject = known_test_subject()
    return add(
        db_engine,
        User(
            issuer="https://tests.invalid",
            subject=subject,
            name=subject,
            email=f"{subject}@example.test",
        ),
    )


def sign_in_as(client, user: User) -> None:
    with client.session_transaction() as session:
        session["_user_id"] = str(user.id)
        session["_fresh"] = True


def csrf(client) -> str:
    page = client.get("/").get_data(as_text=True)
    return re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)


def workflow_for(db_engine, owner: User, steps: list[dict] | None = ONE_SQL_STEP) -> Workflow:
    """A workflow with one saved version of `steps` (none saved when `steps` is None)."""
    workflow = add(
        db_engine,
        Workflow(
            owner_id=owner.id,
            name=f"wf-{secrets.token_hex(3)}",
            latest_version=1 if steps is not None else 0,
        ),
    )
    if steps is not None:
        add(db_engine, WorkflowVersion(workflow_id=workflow.id, version=1, steps=json.dumps(steps)))
    return workflow


def warehouse_row(
    db_engine, owner: User, status: str = "active", name: str | None = None
) -> Warehouse:
    """A warehouse as Lakeport records it (the run dialog and lists read only these rows)."""
    name = name or f"wh-{secrets.token_hex(3)}"
    return add(
        db_engine,
        Warehouse(
            owner_id=owner.id,
            name=name,
            lakekeeper_name=f"u{owner.id}-{name}",
            lakekeeper_id=str(uuid.uuid4()),
            bucket="lake",
            region="us-east-1",
            status=status,
        ),
    )


def unit_row(db_engine, owner: User, state: str = "RUNNING") -> ComputeUnit:
    return add(
        db_engine,
        ComputeUnit(
            owner_id=owner.id, name=f"cu-{secrets.token_hex(3)}", kind="local", state=state
        ),
    )


def equipped(db_engine, owner: User) -> tuple[Workflow, Warehouse, ComputeUnit]:
    """A saved workflow, an active warehouse row and a RUNNING compute-unit row of `owner`."""
    return (
        workflow_for(db_engine, owner),
        warehouse_row(db_engine, owner),
        unit_row(db_engine, owner),
    )


def new_execution(
    db: Session,
    owner: User,
    workflow: Workflow,
    warehouse: Warehouse,
    cu: ComputeUnit | None,
    **fields,
) -> Execution:
    """An Execution of the workflow's first version, not yet added."""
    version_id = db.exec(
        select(WorkflowVersion.id).where(WorkflowVersion.workflow_id == workflow.id)
    ).first()
    return Execution(
        owner_id=owner.id,
        workflow_id=workflow.id,
        workflow_version_id=version_id,
        workflow_version=1,
        compute_unit_id=cu.id if cu else None,
        warehouse_id=warehouse.id,
        warehouse_name=warehouse.name,
        **fields,
    )


def execution_row(
    db_engine,
    owner: User,
    workflow: Workflow,
    warehouse: Warehouse,
    cu: ComputeUnit | None,
    **fields,
) -> Execution:
    with Session(db_engine) as db:
        execution = new_execution(db, owner, workflow, warehouse, cu, **fields)
    return add(db_engine, execution)


def execution_count(db_engine, owner: User) -> int:
    with Session(db_engine) as db:
        return len(db.exec(select(Execution.id).where(Execution.owner_id == owner.id)).all())


def run(client, workflow: Workflow, cu_id, warehouse_id):
    return client.post(
        f"/executions/new?workflow_id={workflow.id}",
        data={
            "compute_unit_id": str(cu_id),
            "warehouse_id": str(warehouse_id),
            "csrf_token": csrf(client),
        },
    )


def text(response) -> str:
    return response.get_data(as_text=True).replace("&#39;", "'").replace("&#34;", '"')


def register_warehouse(client, lakehouse, name: str) -> int:
    """A real warehouse (alice's bucket) registered through the portal for the signed-in user."""
    keys = TEST_USER_KEYS["alice"]
    response = client.post(
        "/warehouses/",
        data={
            "name": name,
            "bucket": keys.bucket,
            "key_prefix": f"tests/{name}-{secrets.token_hex(3)}",
            "endpoint": lakehouse.s3_endpoint,
            "region": "us-east-1",
            "path_style_access": "on",
            "flavor": "s3-compat",
            "access_key_id": keys.access_key_id,
            "secret_access_key": keys.secret_access_key,
            "csrf_token": csrf(client),
        },
    )
    assert response.status_code == 302, text(response)
    return int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def independent_catalog(lakehouse, warehouse: Warehouse):
    return load_catalog(
        "independent",
        type="rest",
        uri=f"{lakehouse.catalog_url}/catalog",
        warehouse=warehouse.lakekeeper_name,
        token=lakehouse.service_token(),
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def signed_in_owners_warehouse(app, lakehouse, db_engine, name: str, namespace: str):
    """A signed-in owner's real warehouse `name` on the local stack, holding `namespace`: the
    signed-in client, the owner, the warehouse and an independent catalog of it."""
    client = app.test_client()
    owner = make_user(db_engine)
    sign_in_as(client, owner)
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, name))
    catalog = independent_catalog(lakehouse, warehouse)
    catalog.create_namespace_if_not_exists(namespace)
    return client, owner, warehouse, catalog


def wait_for(
    client, db_engine, execution_id: int, states: tuple[str, ...], timeout: float = 240.0
) -> Execution:
    """Poll like the page does (the live partial) until the execution reaches one of `states`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert (
            client.get(f"/executions/{execution_id}", headers={"HX-Request": "true"}).status_code
            == 200
        )
        execution = reload(db_engine, Execution, execution_id)
        if execution.state in states:
            return execution
        time.sleep(0.5)
    execution = reload(db_engine, Execution, execution_id)
    raise AssertionError(
        f"execution {execution_id} stayed {execution.state} ({execution.reason}), wanted {states}"
    )


def start_unit(client, db_engine, name: str) -> ComputeUnit:
    """A local unit (2 CPUs, 3 GiB, head only) started through the portal, once RUNNING."""
    return until_running(db_engine, ask_for_unit(client, name))


def ask_for_unit(client, name: str) -> int:
    """Ask the portal for a local unit (2 CPUs, 3 GiB, head only); its id (the worker starts it)."""
    started = client.post(
        "/compute-units/",
        data={
            "name": name,
            "kind": "local",
            "cpus": "2",
            "memory_gb": "3",
            "worker_nodes": "0",
            "csrf_token": csrf(client),
        },
    )
    assert started.status_code == 302, text(started)
    return int(started.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def until_running(db_engine, cu_id: int) -> ComputeUnit:
    """The unit once RUNNING (it fails the test if it fails or takes over 120 s)."""
    deadline = time.monotonic() + 120
    while (cu := reload(db_engine, ComputeUnit, cu_id)).state not in ("RUNNING", "FAILED"):
        assert time.monotonic() < deadline, "the compute unit did not start"
        time.sleep(0.5)
    assert cu.state == "RUNNING", cu.reason
    return cu


def unit_events(db_engine, cu_id: int) -> list[str]:
    with Session(db_engine) as db:
        return [
            event.message
            for event in db.exec(
                select(ComputeUnitEvent)
                .where(ComputeUnitEvent.compute_unit_id == cu_id)
                .order_by(ComputeUnitEvent.id)
            )
        ]


# A step whose tasks sleep until cancelled (Spark interrupts them; the Python workers stop).
SLEEPING_STEP = [
    {
        "name": "slow",
        "kind": "python",
        "output": True,
        "code": "import time\n\ndef run(spark):\n"
        "    spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(300)).count()\n"
        "    return spark.range(1)",
    }
]


def start_sleeping_step(client, db_engine, user, cu_id, warehouse_id) -> int:
    """Run SLEEPING_STEP and return once its Spark job is under way."""
    workflow = workflow_for(db_engine, user, SLEEPING_STEP)
    execution_id = int(
        run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]
    )
    wait_for(client, db_engine, execution_id, ("RUNNING",), timeout=120)
    deadline = time.monotonic() + 60
    while (
        json.loads(reload(db_engine, Execution, execution_id).progress)["steps"][0]["state"]
        != "running"
    ):
        assert time.monotonic() < deadline, "the step did not start"
        time.sleep(0.3)
    # Spark cancels the jobs that run at that moment: give the step time to submit its job.
    time.sleep(3)
    return execution_id


@dataclass
class AuthActions:
    """Signs users in and out of the in-process portal through the real provider."""

    client: object
    passwords: dict[str, str]

    def start(self, next_path: str | None = None) -> str:
        """Begin sign-in at the portal; return the provider's authorization URL."""
        query = {"next": next_path} if next_path else {}
        response = self.client.get("/auth/login/start", query_string=query)
        assert response.status_code == 302, response.data[:500]
        return response.headers["Location"]

    def provider_login(self, authorize_url: str, username: str, password: str) -> httpx.Response:
        with httpx.Client(timeout=10) as browser:
            return login_via_form(browser, authorize_url, username, password)

    def callback(self, redirect_url: str):
        parts = urlsplit(redirect_url)
        return self.client.get(f"{parts.path}?{parts.query}")

    def login(self, username: str = "alice", next_path: str | None = None):
        return sign_in_portal_client(self.client, username, self.passwords[username], next_path)

    def logout(self):
        return self.client.post("/auth/logout", data={"csrf_token": self.csrf_token()})

    def csrf_token(self) -> str:
        page = self.client.get("/").get_data(as_text=True)
        marker = '"X-CSRFToken": "'
        start = page.index(marker) + len(marker)
        return page[start : page.index('"', start)]


# --------------------------------------------------------------------------- groups and operators
def set_groups(db_engine, user: User, groups: list[str]) -> User:
    with Session(db_engine, expire_on_commit=False) as db:
        row = db.get(User, user.id)
        row.groups = json.dumps(groups)
        db.add(row)
        db.commit()
        return row


def share(client, warehouse: Warehouse, **form):
    return client.post(
        f"/warehouses/{warehouse.id}/shares",
        data={**form, "csrf_token": csrf(client)},
        headers={"HX-Request": "true"},
    )


def catalog_client(lakehouse, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=lakehouse.catalog_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def can_read_and_write(lakehouse, warehouse: Warehouse, token: str) -> tuple[int, int]:
    """The catalog's answers to a read (list namespaces) and a write (create one) with `token`."""
    with catalog_client(lakehouse, token) as client:
        read = client.get(f"/catalog/v1/{warehouse.lakekeeper_id}/namespaces").status_code
        wrote = client.post(
            f"/catalog/v1/{warehouse.lakekeeper_id}/namespaces",
            json={"namespace": [f"probe_{secrets.token_hex(3)}"]},
        ).status_code
    return read, wrote


def operator_user(db_engine) -> User:
    user = make_user(db_engine)
    with Session(db_engine, expire_on_commit=False) as db:
        row = db.get(User, user.id)
        row.groups = json.dumps(["analytics", "lakeport-admins"])
        db.add(row)
        db.commit()
        return row


# --------------------------------------------------------------------------- the API
class Api:
    """A client that sends a bearer token and checks each answer against /api/v1/openapi.json."""

    def __init__(self, client, token: str | None) -> None:
        self.client, self.token = client, token
        document = client.get("/api/v1/openapi.json").get_json()
        self.openapi = OpenAPI.from_dict(
            document,
            config=Config(extra_media_type_deserializers={"application/problem+json": json.loads}),
        )

    def call(
        self,
        method: str,
        path: str,
        body=None,
        headers: dict | None = None,
        raw: bytes | None = None,
        documented: bool = True,
    ):
        headers = {
            **({"Authorization": f"Bearer {self.token}"} if self.token else {}),
            **(headers or {}),
        }
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        response = self.client.open(
            path,
            method=method,
            data=data,
            headers=headers,
            content_type="application/json" if data is not None else None,
        )
        if documented:
            self.check(method, path, response, data)
        elif response.status_code >= 400:
            assert response.content_type == "application/problem+json", response.content_type
        return response

    def check(self, method: str, path: str, response, data) -> None:
        plain, _, query = path.partition("?")
        args = dict(pair.split("=", 1) for pair in query.split("&") if pair)
        request = MockRequest(
            "http://localhost",
            method.lower(),
            plain,
            args=args,
            data=data or b"",
            headers={"Authorization": "Bearer x"},
            content_type="application/json",
        )
        answer = MockResponse(
            response.get_data(),
            status_code=response.status_code,
            headers=dict(response.headers),
            content_type=response.content_type.split(";")[0],
        )
        self.openapi.validate_response(
            request, answer
        )  # raises when the answer is not as documented
        if response.status_code >= 400:
            assert response.content_type == "application/problem+json", response.content_type
            assert response.get_json()["status"] == response.status_code


def token_for(app, user, scope: str = "run", days: int = 30) -> str:
    from app.tokens import service as tokens

    with app.app_context():
        return tokens.create(user, f"t-{scope}", scope, days).text


# --------------------------------------------------------- warehouses registered as a provider user
def register_form(lakehouse, name: str, user: str = "alice", **overrides) -> dict:
    keys = TEST_USER_KEYS[user]
    form = {
        "name": name,
        "bucket": keys.bucket,
        "key_prefix": f"tests/{name}-{secrets.token_hex(3)}",
        "endpoint": lakehouse.s3_endpoint,
        "region": "us-east-1",
        "path_style_access": "on",
        "flavor": "s3-compat",
        "access_key_id": keys.access_key_id,
        "secret_access_key": keys.secret_access_key,
    }
    form.update(overrides)
    return form


def register(client, auth, lakehouse, name: str, user: str = "alice", **overrides):
    return client.post(
        "/warehouses/",
        data={**register_form(lakehouse, name, user, **overrides), "csrf_token": auth.csrf_token()},
    )


def warehouse_named(
    db_engine, name: str, owner_email: str = "alice@example.test"
) -> Warehouse | None:
    with Session(db_engine) as db:
        statement = (
            select(Warehouse)
            .join(User, User.id == Warehouse.owner_id)
            .where(Warehouse.name == name, User.email == owner_email)
        )
        return db.exec(statement).first()


# --------------------------------------------------------------- schedules on a clock the test sets
T0 = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)


def schedule_row(
    db_engine, owner, workflow, warehouse, cu, cron="*/5 * * * *", catch_up="skip", handled_until=T0
) -> Schedule:
    with Session(db_engine, expire_on_commit=False) as db:
        schedule = Schedule(
            owner_id=owner.id,
            workflow_id=workflow.id,
            cron=cron,
            timezone="UTC",
            compute_unit_id=cu.id,
            warehouse_id=warehouse.id,
            catch_up=catch_up,
            handled_until=handled_until,
            created_at=handled_until,
        )
        db.add(schedule)
        db.commit()
        return schedule


def runs(db_engine, schedule) -> list[ScheduledRun]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(ScheduledRun)
                .where(ScheduledRun.schedule_id == schedule.id)
                .order_by(ScheduledRun.due_at)
            )
        )


def at(monkeypatch, moment: datetime) -> None:
    from app.schedules import service as schedules_service

    monkeypatch.setattr(schedules_service, "now", lambda: moment)


def set_execution(db_engine, execution_id: int, **fields) -> None:
    update_row(db_engine, Execution, execution_id, **fields)


# --------------------------------------------------------------------------- notifications


def scheduled(client, db_engine, owner, **fields) -> tuple[Schedule, str | None]:
    """A schedule made through its page; the webhook secret the page showed once."""
    workflow, warehouse, cu = equipped(db_engine, owner)
    form = {
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "compute_unit_id": str(cu.id),
        "warehouse_id": str(warehouse.id),
        "catch_up": "skip",
        "notify_on": "both",
        "csrf_token": csrf(client),
        **fields,
    }
    page = client.post(f"/schedules/workflow/{workflow.id}", data=form)
    assert page.status_code in (200, 302), page.get_data(as_text=True)[:3000]
    shown = re.search(
        r'data-testid="webhook-secret-text">([0-9a-f]+)<', page.get_data(as_text=True)
    )
    with Session(db_engine, expire_on_commit=False) as db:
        schedule = db.exec(select(Schedule).where(Schedule.workflow_id == workflow.id)).one()
        schedule.handled_until = T0
        db.add(schedule)
        db.commit()
    return schedule, shown.group(1) if shown else None


def run_ends(app, db_engine, monkeypatch, schedule, state: str) -> None:
    from app.schedules import work as schedules_work

    at(monkeypatch, T0 + timedelta(minutes=5, seconds=2))
    with app.app_context():
        schedules_work.fire_due()
    (run,) = runs(db_engine, schedule)
    set_execution(
        db_engine, run.execution_id, state=state, reason="boom" if state == "FAILED" else ""
    )
    with app.app_context():
        schedules_work.fire_due()  # sees the end: queues the notifications


def deliver_all(app, of: Schedule | int) -> None:
    """Deliver the due notifications of one schedule, or of one execution (its id). Other tests'
    rows share the database and are not this test's to send, to this test's receivers."""
    from app.executions import delivery

    with app.app_context():
        due = {subject: function for _name, function, subject in delivery.pending_work()}
        with Session(app.extensions["db_engine"]) as db:
            mine = select(Notification.id).where(Notification.id.in_(list(due)))
            if isinstance(of, Schedule):
                mine = mine.where(Notification.schedule_id == of.id)
            else:
                mine = mine.where(Notification.execution_id == of)
            ids = db.exec(mine).all()
        for notification_id in sorted(ids):
            due[notification_id](notification_id)


def notes(db_engine, schedule) -> list[Notification]:
    with Session(db_engine) as db:
        return list(db.exec(select(Notification).where(Notification.schedule_id == schedule.id)))
