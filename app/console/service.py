"""The console, the request side: a query's rules and its recorded intent.

`start` checks the warehouse (one the user may read; may write, for a query in write mode), the
unit (the user's own, running; or one made for the query: a warm unit claimed from the pool,
refused when none is ready, or "start one for me", within the user's limit) and the statement (one, and no write in read mode: sqlglot's check
of compute/run/query.py, which the unit repeats with Spark's own plan), and records the query
QUEUED. A request never waits on the unit: the worker (app/console/work.py) submits the query,
watches it and records its end through `finish`. `cancel` ends a QUEUED query at once and records
the cancel of a RUNNING one, which the worker passes on. Every change of state is compare-and-set:
whichever of a cancel and the worker comes first wins, and a final state stays.
"""

from __future__ import annotations

import secrets

from flask import current_app

from app.audit import service as audit
from app.compute_units import pool
from app.compute_units import service as units
from app.db import get_db
from app.errors import UserFacingError
from app.models import (
    ComputeUnit,
    Query,
    QueryState,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
    Workflow,
    utcnow,
)
from app.transitions import compare_and_set
from app.warehouses import sharing
from app.workflows import service as workflows
from compute.contract import Step
from compute.run.query import (
    MAX_BYTES_CARRIED,
    MAX_ROWS_CARRIED,
    READ,
    WRITE,
    StatementRefused,
    check_statement,
)

MAX_SQL_LENGTH = 100_000
MODES = {READ: "Read only", WRITE: "Writing"}
# A unit made for a query, not running yet: the query waits for it, QUEUED.
STARTING = (UnitState.PENDING, UnitState.STARTING)
# The units a query may ask to be made for it: a warm one claimed from the pool, or one started
# (from the pool when one is ready).
FROM_POOL, START_ONE = "pool", "new"
NEW_UNITS = (FROM_POOL, START_ONE)


def bounds() -> tuple[int, int]:
    """(rows, bytes): how much of a result comes back from the unit (LAKEPORT_CONSOLE_MAX_ROWS and
    _BYTES, which the portal's start holds within what a unit's answer carries; held here too,
    as the unit holds them, compute/run/query.py)."""
    config = current_app.config
    return (
        max(1, min(int(config["CONSOLE_MAX_ROWS"]), MAX_ROWS_CARRIED)),
        max(1024, min(int(config["CONSOLE_MAX_BYTES"]), MAX_BYTES_CARRIED)),
    )


class QueryRefused(UserFacingError):
    """A query or its cancel was refused; `message` is for the user, `field` the form's field."""


def readable(user: User, warehouse: Warehouse | None) -> bool:
    """Whether `user` may query `warehouse` (their own, or shared with them; not purged)."""
    return (
        warehouse is not None
        and sharing.access_of(user, warehouse) is not None
        and warehouse.status in (WarehouseStatus.ACTIVE, WarehouseStatus.ARCHIVED)
    )


def writable(user: User, warehouse: Warehouse | None) -> bool:
    """Whether `user` may write into `warehouse` from the console (owner or write share, active)."""
    return (
        warehouse is not None
        and sharing.access_of(user, warehouse) in (sharing.OWNER, sharing.WRITE)
        and warehouse.status == WarehouseStatus.ACTIVE
    )


def check(
    owner: User,
    warehouse: Warehouse | None,
    cu: ComputeUnit | None,
    sql: str,
    mode: str,
    starting: bool = False,
) -> dict[str, str]:
    """Why this query cannot run (field → message); {} if it can. `starting`: the unit may still
    be starting (one made for this query)."""
    errors: dict[str, str] = {}
    if not readable(owner, warehouse):
        errors["warehouse_id"] = "Choose a warehouse you may read."
    elif mode == WRITE and not writable(owner, warehouse):
        errors["mode"] = (
            f"You may not write into warehouse {warehouse.name}: switch the console to read only."
        )
    if mode not in MODES:
        errors["mode"] = "Choose read only or writing."
    if cu is None or cu.owner_id != owner.id:
        errors["compute_unit_id"] = "Choose one of your running compute units."
    elif cu.state != UnitState.RUNNING and not (starting and cu.state in STARTING):
        errors["compute_unit_id"] = f"Compute unit {cu.name} is {cu.state.lower()}, not running."
    if len(sql) > MAX_SQL_LENGTH:
        errors["sql"] = f"A statement is at most {MAX_SQL_LENGTH:,} characters."
    elif mode in MODES:
        try:
            check_statement(sql, mode)
        except StatementRefused as refused:
            errors["sql"] = f"Refused: {refused}."
    return errors


def start(
    owner: User,
    warehouse: Warehouse | None,
    cu: ComputeUnit | None,
    sql: str,
    mode: str = READ,
    new_unit: str | None = None,
) -> Query:
    """Record a QUEUED query; the worker runs it. Raises QueryRefused with the field at fault.
    `new_unit` asks for a unit made for the query instead of `cu`: FROM_POOL claims a warm unit
    of the pool (refused when none is ready), START_ONE makes a unit of the pool's size (claimed
    from the pool when one is ready, else started); the query waits for it. A statement run in
    write mode is recorded in the audit trail."""
    if new_unit is not None:
        errors = check(owner, warehouse, None, sql, mode)
        errors.pop("compute_unit_id", None)
        if not errors:
            cu = _new_unit(owner, new_unit)
    if errors := check(owner, warehouse, cu, sql, mode, starting=new_unit is not None):
        field, message = next(iter(errors.items()))
        raise QueryRefused(message, field)
    statement = check_statement(sql, mode)
    query = Query(
        owner_id=owner.id,
        warehouse_id=warehouse.id,
        warehouse_name=warehouse.name,
        compute_unit_id=cu.id,
        compute_unit_name=cu.name[:64],
        sql=sql,
        mode=mode,
        statement=statement.name[:64],
    )
    db = get_db()
    db.add(query)
    db.commit()
    if mode == WRITE:
        audit.record(
            "query.write",
            query,
            warehouse_id=warehouse.id,
            warehouse_owner_id=warehouse.owner_id,
            unit_id=cu.id,
            statement=statement.name,
            writes=statement.writes,
            sql=sql[:1000],
            actor=owner,
        )
    return query


def pool_ready() -> int:
    """How many warm units the pool could hand a query now (0 without a pool)."""
    if current_app.config["CU_POOL_SIZE"] <= 0:
        return 0
    return pool.summary().ready


def _new_unit(owner: User, how: str) -> ComputeUnit:
    if how not in NEW_UNITS:
        raise QueryRefused("Choose one of your running compute units.", "compute_unit_id")
    if how == FROM_POOL and not pool_ready():
        raise QueryRefused(
            "No warm unit is ready in the pool right now: choose “Start one for me” (it starts "
            "one) or one of your running units.",
            "compute_unit_id",
        )
    # A unit of exactly the pool's size: the create claims a ready one (should another user
    # have claimed the last one a moment ago, one of that size starts instead).
    values = {**pool.unit_values(current_app.config), "name": f"console-{secrets.token_hex(3)}"}
    try:
        return units.create(owner, values)
    except units.ComputeUnitError as error:
        raise QueryRefused(error.message, "compute_unit_id") from None


def cancel(query: Query) -> None:
    """Cancel a QUEUED query at once, or record the cancel of a RUNNING one (the worker passes it
    to the unit and records CANCELLED once the unit has stopped it)."""
    if query.state in QueryState.FINAL:
        raise QueryRefused("This query has already finished.")
    if (
        compare_and_set(
            Query,
            query.id,
            (QueryState.QUEUED,),
            state=QueryState.CANCELLED,
            error="cancelled before it ran",
            ended_at=utcnow(),
        )
        is None
    ):
        compare_and_set(Query, query.id, (QueryState.RUNNING,), cancel_requested_at=utcnow())
    get_db().refresh(query)


def run_again(owner: User, query: Query) -> Query:
    """The same statement, in the same mode, on the same warehouse and unit (checked again)."""
    db = get_db()
    return start(
        owner,
        db.get(Warehouse, query.warehouse_id) if query.warehouse_id else None,
        db.get(ComputeUnit, query.compute_unit_id) if query.compute_unit_id else None,
        query.sql,
        query.mode,
    )


def as_workflow(owner: User, query: Query) -> Workflow:
    """A new workflow of the owner's whose one step, an output, is the query's statement: what
    runs it in full, its rows written to a table (the console brings back only the first)."""
    if query.mode != READ or query.statement.split()[0] in ("EXPLAIN", "SHOW", "DESCRIBE"):
        raise QueryRefused("Only a read query's rows can become a workflow's output.")
    base, number, workflow = f"query {query.id}", 1, None
    while workflow is None:
        try:
            workflow = workflows.create(
                owner,
                base if number == 1 else f"{base} ({number})",
                f"From the console: query {query.id} on warehouse {query.warehouse_name}.",
            )
        except workflows.WorkflowActionError as error:
            if error.field != "name" or number >= 20:
                raise QueryRefused(error.message) from None
            number += 1
    try:
        workflows.save_version(workflow, [Step("result", "sql", query.sql, output=True)], 0)
    except workflows.WorkflowActionError as error:
        raise QueryRefused(error.message) from None
    return workflow


def transition(query_id: int, from_states, **changes) -> bool:
    return compare_and_set(Query, query_id, from_states, **changes) is not None


def finish(query_id: int, state: str, **changes) -> bool:
    """Record a final state, unless another one was recorded first."""
    return transition(query_id, QueryState.LIVE, state=state, ended_at=utcnow(), **changes)
