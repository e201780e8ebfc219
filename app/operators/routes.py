"""The operators' page and their two actions: terminate any unit, cancel any execution (both
recorded in the audit trail as the operator's, with the owner the object belongs to)."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, url_for

from app.compute_units import pool
from app.compute_units import service as unit_service
from app.db import get_db
from app.executions import service as execution_service
from app.models import ComputeUnit, Execution
from app.operators import bp, queries
from app.roles import operator_required


@bp.get("/")
@operator_required
def index():
    return render_template(
        "operators/index.html",
        units=queries.live_units(),
        executions=queries.recent_executions(),
        warehouses=queries.warehouses(),
        usage=queries.usage_by_user(),
        usage_days=queries.USAGE_DAYS,
        pool=pool.summary(),
    )


@bp.post("/units/<int:cu_id>/terminate")
@operator_required
def terminate_unit(cu_id: int):
    unit = get_db().get(ComputeUnit, cu_id) or abort(404)
    unit_service.terminate(unit, reason="terminated by an operator")
    flash(f"Compute unit {unit.name} (#{unit.id}) is being terminated.", "info")
    return redirect(url_for("operators.index"))


@bp.post("/executions/<int:execution_id>/cancel")
@operator_required
def cancel_execution(execution_id: int):
    execution = get_db().get(Execution, execution_id) or abort(404)
    try:
        execution_service.cancel(execution, by="an operator")
    except execution_service.RunRefused as refusal:
        flash(refusal.message, "error")
    else:
        flash(f"Execution #{execution.id} is being cancelled.", "info")
    return redirect(url_for("operators.index"))
