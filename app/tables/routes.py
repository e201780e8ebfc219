"""The table page's sections (templates/warehouses/table.html loads each as a partial): health,
policy and story. Anyone who may read the warehouse sees them; only who may write it sets the
policy; anyone else gets 404 on every route, exactly like a missing table."""

from __future__ import annotations

from flask import abort, current_app, render_template, request
from flask_login import current_user

from app.iceberg_catalogs import ResultReadError
from app.models import Warehouse, WarehouseStatus
from app.tables import bp, forms, queries, service
from app.warehouses import sharing
from app.warehouses.queries import valid_table_name

SECTION = "/warehouses/<int:warehouse_id>/tables/<name>"


def _table(warehouse_id: int, name: str, need: str | None = None) -> Warehouse:
    warehouse = sharing.accessible_or_404(warehouse_id, need)
    if not valid_table_name(name):
        abort(404)
    return warehouse


def _may_write(warehouse: Warehouse) -> bool:
    return sharing.access_of(current_user, warehouse) in (sharing.OWNER, sharing.WRITE)


def _owns(warehouse: Warehouse) -> bool:
    return sharing.access_of(current_user, warehouse) == sharing.OWNER


@bp.get(f"{SECTION}/health")
def health(warehouse_id: int, name: str):
    warehouse = _table(warehouse_id, name)
    policy = queries.policy_of(warehouse, name)
    try:
        figures, error = queries.health(warehouse, name, policy), None
    except ResultReadError as failure:
        figures, error = None, failure.args[0]
    return render_template(
        "tables/_health.html",
        warehouse=warehouse,
        name=name,
        health=figures,
        error=error,
        policy=policy,
    )


def _policy(warehouse: Warehouse, name: str, *, values=None, errors=None, message=None, status=200):
    policy = queries.policy_of(warehouse, name)
    return render_template(
        "tables/_policy.html",
        warehouse=warehouse,
        name=name,
        policy=policy,
        may_write=_may_write(warehouse),
        owns=_owns(warehouse),
        values=values or forms.form_values(policy),
        errors=errors or {},
        message=message,
    ), status


@bp.get(f"{SECTION}/policy")
def policy(warehouse_id: int, name: str):
    return _policy(_table(warehouse_id, name), name)


@bp.post(f"{SECTION}/policy")
def save_policy(warehouse_id: int, name: str):
    warehouse = _table(warehouse_id, name, sharing.WRITE)
    values, errors = forms.parse_policy(request.form, name)
    if warehouse.status != WarehouseStatus.ACTIVE:
        errors["form"] = "Only an active warehouse's tables can be maintained."
    if errors:
        return _policy(
            warehouse, name, values=dict(request.form.items()), errors=errors, status=422
        )
    if not _owns(warehouse):  # the box is the owner's (service.StartUnitRefused): kept as saved
        saved = queries.policy_of(warehouse, name)
        values["start_unit"] = saved is not None and saved.start_unit
    service.save_policy(warehouse, name, values, current_user)
    return _policy(
        warehouse, name, message="Policy saved: the worker checks the table at its next pass."
    )


@bp.get(f"{SECTION}/story")
def story(warehouse_id: int, name: str):
    warehouse = _table(warehouse_id, name)
    try:
        told, error = queries.story(warehouse, name, current_user), None
    except ResultReadError as failure:
        told, error = None, failure.args[0]
    return render_template(
        "tables/_story.html",
        warehouse=warehouse,
        name=name,
        story=told,
        error=error,
        history=queries.history(warehouse, name),
        catalog_uri=current_app.config["LAKEKEEPER_URL"].rstrip("/") + "/catalog",
    )
