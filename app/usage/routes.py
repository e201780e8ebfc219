from __future__ import annotations

from flask import render_template, request
from flask_login import current_user

from app.charts import storage_history_svg
from app.db import get_db, get_owned_or_404
from app.models import ComputeUnit, Execution, Warehouse
from app.usage import bp, forms, queries, service
from app.warehouses.queries import user_warehouses

USAGE_PERIODS = (7, 30)


@bp.get("/usage")
def index():
    warehouses = user_warehouses(current_user)
    samples = queries.latest_samples([warehouse.id for warehouse in warehouses])
    totals = [queries.user_totals(current_user, days) for days in USAGE_PERIODS]
    return render_template(
        "usage/index.html", totals=totals, warehouses=warehouses, samples=samples
    )


@bp.get("/warehouses/<int:warehouse_id>/storage")
def warehouse_storage(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    history = queries.storage_history(warehouse)
    return render_template(
        "usage/_warehouse_storage.html",
        warehouse=warehouse,
        samples=queries.latest_samples([warehouse.id]).get(warehouse.id, []),
        chart=storage_history_svg(history) if len(history) > 1 else None,
    )


def _retention(
    warehouse: Warehouse, *, values=None, errors=None, preview=None, message=None, status=200
):
    policy = queries.policy_of(warehouse)
    return render_template(
        "usage/_retention.html",
        warehouse=warehouse,
        policy=policy,
        modes=forms.RESULTS_MODES,
        values=values or forms.form_values(policy),
        errors=errors or {},
        preview=preview,
        message=message,
        log=queries.log_of(warehouse),
        job=queries.latest_job(warehouse),
        unit=queries.running_unit(warehouse.owner_id),
    ), status


@bp.get("/warehouses/<int:warehouse_id>/retention")
def retention_panel(warehouse_id: int):
    return _retention(get_owned_or_404(Warehouse, warehouse_id))


@bp.post("/warehouses/<int:warehouse_id>/retention")
def save_retention(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    values, errors = forms.parse_policy(request.form)
    if errors:
        return _retention(warehouse, values=dict(request.form.items()), errors=errors, status=422)
    service.save_policy(warehouse, values)
    return _retention(
        warehouse, message="Retention policy saved. Preview to see what it drops now."
    )


@bp.post("/warehouses/<int:warehouse_id>/retention/preview")
def preview_retention(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    policy = queries.policy_of(warehouse)
    if policy is None:
        return _retention(warehouse, errors={"form": "Save a retention policy first."}, status=422)
    return _retention(warehouse, preview=queries.plan(warehouse, policy))


@bp.post("/warehouses/<int:warehouse_id>/retention/enforce")
def enforce_retention(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    policy = queries.policy_of(warehouse)
    if policy is None:
        return _retention(warehouse, errors={"form": "Save a retention policy first."}, status=422)
    try:
        entry = service.enforce_retention(warehouse, policy, forms.confirmed_tables(request.form))
    except service.RetentionError as error:
        return _retention(warehouse, errors={"form": error.message}, status=422)
    return _retention(
        warehouse, message=f"{entry.message[:200]}{'…' if len(entry.message) > 200 else ''}"
    )


@bp.post("/warehouses/<int:warehouse_id>/maintenance")
def request_maintenance(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    policy = queries.policy_of(warehouse)
    try:
        service.request_maintenance(
            warehouse,
            policy.snapshots_retain_last if policy else None,
            remove_orphans=request.form.get("remove_orphans") == "on",
        )
    except service.MaintenanceRefused as refusal:
        return _retention(warehouse, errors={"maintenance": refusal.message}, status=422)
    return _retention(warehouse, message="Snapshot expiry is queued on your running compute unit.")


@bp.get("/executions/<int:execution_id>/usage")
def execution_usage(execution_id: int):
    execution = get_owned_or_404(Execution, execution_id)
    unit = (
        get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
    )
    return render_template(
        "usage/_execution_usage.html",
        execution=execution,
        compute=queries.compute_of(execution, unit),
        usage=queries.usage_of(execution.id),
    )
