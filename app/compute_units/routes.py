from __future__ import annotations

from flask import current_app, flash, redirect, render_template, request, url_for
from flask_login import current_user
from htmx_flask import make_response

from app.compute_units import bp, forms, lifecycle
from app.compute_units.backends import KIND_LABELS, enabled_kinds
from app.compute_units.lifecycle import ComputeUnitError
from app.db import get_owned_or_404
from app.models import ComputeUnit


@bp.context_processor
def form_choices() -> dict:
    kinds = enabled_kinds(current_app.config)
    return {"kinds": {kind: KIND_LABELS[kind] for kind in kinds}, "limits": forms.limits(current_app.config)}


def _unit(cu_id: int) -> ComputeUnit:
    return get_owned_or_404(ComputeUnit, cu_id)


@bp.get("/")
def index():
    units = lifecycle.user_compute_units(current_user)
    return render_template("compute_units/index.html", units=units)


@bp.get("/new")
def new():
    kinds = enabled_kinds(current_app.config)
    return render_template("compute_units/new.html", values=forms.defaults(kinds), errors={})


@bp.post("/")
def create():
    kinds = enabled_kinds(current_app.config)
    values, errors = forms.parse(request.form, current_app.config, kinds)
    if not errors:
        try:
            cu = lifecycle.create(current_user, values)
        except ComputeUnitError as error:
            errors[error.field or "form"] = error.message
        else:
            flash(f"Compute unit {cu.name} is starting.", "success")
            return redirect(url_for("compute_units.detail", cu_id=cu.id))
    return render_template("compute_units/new.html", values=request.form, errors=errors), 422


@bp.get("/<int:cu_id>")
def detail(cu_id: int):
    cu = _unit(cu_id)
    status = lifecycle.refresh(cu)
    template = "compute_units/_detail_status.html" if request.htmx else "compute_units/detail.html"
    return render_template(template, cu=cu, status=status, events=lifecycle.recent_events(cu),
                           executions=lifecycle.running_executions(cu), handle=lifecycle.handle_of(cu))


@bp.get("/<int:cu_id>/row")
def row(cu_id: int):
    cu = _unit(cu_id)
    lifecycle.refresh(cu)
    return render_template("compute_units/_row.html", cu=cu)


@bp.post("/<int:cu_id>/terminate")
def terminate(cu_id: int):
    cu = _unit(cu_id)
    lifecycle.terminate(cu, reason="terminated by its owner")
    flash(f"Compute unit {cu.name} is terminating.", "info")
    url = url_for("compute_units.detail", cu_id=cu.id)
    return make_response("", redirect=url) if request.htmx else redirect(url)
