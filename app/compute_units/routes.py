from __future__ import annotations

from flask import current_app, flash, redirect, render_template, request, url_for
from flask_login import current_user

from app import live_partials
from app.compute_units import bp, forms, handles, pool, queries, service
from app.compute_units.backends import KIND_LABELS, unit_choices
from app.compute_units.phase import Phase, phase_of
from app.compute_units.service import ComputeUnitError
from app.db import get_owned_or_404
from app.models import ComputeUnit, UnitState
from app.web import redirect_to

# What templates/compute_units/_row.html shows of a unit, besides its phase: its version. (Not the
# worker's checks of its cluster, which change at every pass and which the row does not show.)
ROW_SHOWS = (
    "id",
    "name",
    "kind",
    "cpus",
    "memory_gb",
    "worker_nodes",
    "state",
    "reason",
    "progress_step",
    "created_at",
)


def _choices() -> tuple[list[str], list[str]]:
    return unit_choices(current_app.config, current_user)


@bp.context_processor
def form_choices() -> dict:
    if not current_user.is_authenticated:  # an error page for a request without a session
        return {}
    kinds, clusters = _choices()
    return {
        "kinds": {kind: KIND_LABELS[kind] for kind in kinds},
        "ray_clusters": clusters,
        "limits": forms.limits(current_app.config),
    }


@bp.app_template_global()
def unit_phase(cu: ComputeUnit) -> Phase:
    """The unit's state as its pages show it: WARMING while its Spark session starts."""
    return phase_of(cu, queries.recent_events(cu))


def _unit(cu_id: int) -> ComputeUnit:
    return get_owned_or_404(ComputeUnit, cu_id)


@bp.get("/")
def index():
    units = queries.user_compute_units(current_user)
    return render_template("compute_units/index.html", units=units)


@bp.get("/new")
def new():
    pooled = pool.unit_values(current_app.config) if current_app.config["CU_POOL_SIZE"] else None
    return render_template(
        "compute_units/new.html",
        values=forms.defaults(*_choices(), pooled=pooled),
        errors={},
        pooled=pooled,
    )


@bp.post("/")
def create():
    values, errors = forms.parse(request.form, current_app.config, *_choices())
    if not errors:
        try:
            cu = service.create(current_user, values)
        except ComputeUnitError as error:
            errors[error.field or "form"] = error.message
        else:
            flash(f"Requested compute unit {cu.name}.", "success")
            return redirect(url_for("compute_units.detail", cu_id=cu.id))
    pooled = pool.unit_values(current_app.config) if current_app.config["CU_POOL_SIZE"] else None
    return render_template(
        "compute_units/new.html", values=request.form, errors=errors, pooled=pooled
    ), 422


@bp.get("/<int:cu_id>")
def detail(cu_id: int):
    cu = _unit(cu_id)
    template = "compute_units/_detail_status.html" if request.htmx else "compute_units/detail.html"
    return render_template(
        template,
        cu=cu,
        status=queries.recorded_status(cu),
        events=queries.recent_events(cu),
        executions=queries.running_executions(cu),
        handle=handles.recorded_handle(cu),
    )


@bp.get("/<int:cu_id>/row")
def row(cu_id: int):
    """The list's row of a unit, polling itself until the unit has ended; a poll that finds the
    unit as the browser's copy shows it answers 304 (app/live_partials.py)."""
    cu = _unit(cu_id)
    phase = unit_phase(cu)
    if cu.state in UnitState.FINAL:
        return render_template("compute_units/_row.html", cu=cu, phase=phase)
    version = tuple(getattr(cu, column) for column in ROW_SHOWS) + (
        phase.name,
        phase.elapsed_seconds(),
    )
    return live_partials.conditional(
        version, lambda: render_template("compute_units/_row.html", cu=cu, phase=phase)
    )


@bp.post("/<int:cu_id>/terminate")
def terminate(cu_id: int):
    cu = _unit(cu_id)
    service.terminate(cu, reason="terminated by its owner")
    flash(f"Requested the termination of {cu.name}.", "info")
    url = url_for("compute_units.detail", cu_id=cu.id)
    return redirect_to(url)


@bp.post("/<int:cu_id>/clear")
def clear(cu_id: int):
    """Clear an ended unit from the list (its row, and its executions' link to it, stay)."""
    cu = _unit(cu_id)
    cleared = service.clear(current_user, cu.id)
    if request.htmx:
        # The list's row goes away; a unit still running keeps its row.
        return "" if cleared else render_template("compute_units/_row.html", cu=cu)
    if cleared:
        flash(f"Cleared {cu.name} from the list.", "info")
    else:
        flash(f"{cu.name} is {cu.state}: only ended units can be cleared.", "error")
    return redirect(url_for("compute_units.index"))


@bp.post("/clear")
def clear_ended():
    cleared = service.clear(current_user)
    flash(
        f"Cleared {cleared} ended compute unit{'' if cleared == 1 else 's'} from the list.", "info"
    )
    url = url_for("compute_units.index")
    return redirect_to(url)
