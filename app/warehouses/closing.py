"""The worker's part of closing a warehouse: what a request could not do without waiting.

Deactivating or archiving a warehouse that runs were writing into: the request stopped the runs
(app/executions/stopping.py) and left the catalog's part owed on the warehouse's row
(`closing`): taking write access away must wait until the cancelled runs have dropped their
partial outputs, and a request never waits on a unit. Purging: Lakekeeper deletes a warehouse
only once its purge tasks have drained; the worker asks again every second until then. The worker does it
once no run writes into the warehouse any more, or at `closing_due_at` at the latest. A
catalog that refuses or does not answer is tried again CLOSING_RETRY_SECONDS later, and the
warehouse's page says why meanwhile; its status (no new executions) holds throughout.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlmodel import Session, select

from app.db import engine, get_db
from app.models import Warehouse, utcnow
from app.warehouses import service

logger = logging.getLogger(__name__)

CLOSING_RETRY_SECONDS = 30.0


def pending_work() -> list[tuple[str, object, int]]:
    with Session(engine()) as db:
        ids = db.exec(select(Warehouse.id).where(Warehouse.closing != "")).all()
    return [
        (f"warehouse-closing:{warehouse_id}", finish_closing, warehouse_id) for warehouse_id in ids
    ]


def finish_closing(warehouse_id: int) -> None:
    """Do the catalog's part owed on the warehouse if it is due: its runs have stopped, or the
    wait is over (a run that will not stop does not keep its warehouse open)."""
    db = get_db()
    warehouse = db.get(Warehouse, warehouse_id)
    if warehouse is None or not warehouse.closing:
        return
    step = warehouse.closing
    due = warehouse.closing_due_at is None or utcnow() >= warehouse.closing_due_at
    # An archive or deactivation goes ahead as soon as its runs have stopped; a retry waits.
    runs_stopped = (
        step != service.CLOSING_PURGE
        and not warehouse.closing_error
        and not service.running_into(warehouse)
    )
    if not (due or runs_stopped):
        return  # looked at again at the worker's next pass
    try:
        done = service.catalog_step(warehouse, step)
    except service.WarehouseActionError as error:
        logger.warning(
            "warehouse %s: the catalog's part of %s failed: %s", warehouse_id, step, error.message
        )
        warehouse.closing_error = error.message[:2000]
        warehouse.closing_due_at = utcnow() + timedelta(seconds=CLOSING_RETRY_SECONDS)
        warehouse.updated_at = utcnow()
    else:
        if not done:  # a purge whose tasks still run
            warehouse.closing_due_at = utcnow() + timedelta(seconds=service.PURGE_RETRY_SECONDS)
        elif step == service.CLOSING_PURGE:
            return  # the row is gone with the warehouse
        else:
            logger.info("warehouse %s: the catalog's part of %s is done", warehouse_id, step)
            service.owe_nothing(warehouse)
            warehouse.updated_at = utcnow()
    db.add(warehouse)
    db.commit()
