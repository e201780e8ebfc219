"""A table's policy saved by someone who may write its warehouse, recorded in the audit trail.
The policy only records intent: the worker's policy pass (work.py) acts on it."""

from __future__ import annotations

from sqlmodel import Session, select

from app.audit import service as audit
from app.db import engine
from app.models import TablePolicy, User, Warehouse, utcnow


def save_policy(warehouse: Warehouse, table_name: str, values: dict, by: User) -> TablePolicy:
    with Session(engine(), expire_on_commit=False) as db:
        policy = db.exec(
            select(TablePolicy).where(
                TablePolicy.warehouse_id == warehouse.id, TablePolicy.table_name == table_name
            )
        ).first()
        before = _shown(policy)
        policy = policy or TablePolicy(warehouse_id=warehouse.id, table_name=table_name)
        for key, value in values.items():
            setattr(policy, key, value)
        policy.updated_by, policy.updated_at = by.id, utcnow()
        db.add(policy)
        db.commit()
    audit.record(
        "table.policy",
        warehouse,
        owner_id=warehouse.owner_id,
        table=table_name,
        before=before,
        after=_shown(policy),
    )
    return policy


def _shown(policy: TablePolicy | None) -> dict | None:
    if policy is None:
        return None
    return {
        "small_file_mb": policy.small_file_mb,
        "compact_small_files": policy.compact_small_files,
        "expire_days": policy.expire_days,
        "start_unit": policy.start_unit,
    }
