"""A table's policy saved by someone who may write its warehouse, recorded in the audit trail.
The policy only records intent: the worker's policy pass (work.py) acts on it.

`start_unit` is the warehouse owner's alone: it starts units of the owner's (their compute and
their unit limit), so a sharee who may write the warehouse saves the rest of the policy and
leaves it as the owner set it (`StartUnitRefused` if they ask to change it)."""

from __future__ import annotations

from sqlmodel import Session, select

from app.audit import service as audit
from app.db import engine
from app.models import TablePolicy, User, Warehouse, utcnow


class StartUnitRefused(Exception):
    """Someone other than the warehouse's owner asked to change `start_unit`."""

    message = (
        "Only the warehouse's owner decides whether a unit of theirs is started for its "
        "tables' maintenance."
    )


def save_policy(warehouse: Warehouse, table_name: str, values: dict, by: User) -> TablePolicy:
    with Session(engine(), expire_on_commit=False) as db:
        policy = db.exec(
            select(TablePolicy).where(
                TablePolicy.warehouse_id == warehouse.id, TablePolicy.table_name == table_name
            )
        ).first()
        if by.id != warehouse.owner_id and bool(values.get("start_unit")) != bool(
            policy is not None and policy.start_unit
        ):
            raise StartUnitRefused()
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
