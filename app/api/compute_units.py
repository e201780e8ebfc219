"""The API's compute units: list, create, get, terminate."""

from __future__ import annotations

from flask import current_app
from flask_login import current_user
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, page_of
from app.api.problems import ApiProblem
from app.compute_units import forms
from app.compute_units import queries as unit_queries
from app.compute_units import service as unit_service
from app.compute_units.backends import unit_choices
from app.compute_units.service import ComputeUnitError
from app.db import get_db, get_owned_or_404
from app.models import ComputeUnit


def unit_out(row: ComputeUnit) -> schemas.ComputeUnit:
    return schemas.ComputeUnit.model_validate(row, from_attributes=True)


@bp.get("/compute-units")
@spec.validate(
    query=schemas.ListQuery,
    resp=Response(HTTP_200=schemas.ComputeUnitPage, **ERRORS),
    tags=["compute units"],
)
def list_compute_units(query: schemas.ListQuery):
    """Your compute units (but those you cleared from the list)."""
    return page_of(
        unit_queries.user_compute_units(current_user), query, unit_out, schemas.ComputeUnitPage
    )


@bp.post("/compute-units")
@spec.validate(
    json=schemas.ComputeUnitCreate,
    resp=Response(HTTP_201=schemas.ComputeUnit, HTTP_409=schemas.Problem, **ERRORS),
    tags=["compute units"],
)
def create_compute_unit(json: schemas.ComputeUnitCreate):
    """Ask for a compute unit: it is PENDING until the worker has started it."""
    values, errors = forms.parse(
        {key: str(value) for key, value in json.model_dump().items()},
        current_app.config,
        *unit_choices(current_app.config, current_user),
    )
    if errors:
        field, message = next(iter(errors.items()))
        raise ApiProblem(400, message, field)
    try:
        return unit_out(unit_service.create(current_user, values)), 201
    except ComputeUnitError as error:
        raise ApiProblem(
            409 if error.field in (None, "form") else 400, error.message, error.field
        ) from None


@bp.get("/compute-units/<int:cu_id>")
@spec.validate(resp=Response(HTTP_200=schemas.ComputeUnit, **ERRORS), tags=["compute units"])
def get_compute_unit(cu_id: int):
    """One of your compute units."""
    return unit_out(get_owned_or_404(ComputeUnit, cu_id))


@bp.post("/compute-units/<int:cu_id>/terminate")
@spec.validate(resp=Response(HTTP_202=schemas.ComputeUnit, **ERRORS), tags=["compute units"])
def terminate_compute_unit(cu_id: int):
    """Ask for the unit to be stopped: it is TERMINATING until the worker has stopped it."""
    cu = get_owned_or_404(ComputeUnit, cu_id)
    unit_service.terminate(cu, reason="terminated by its owner")
    get_db().refresh(cu)
    return unit_out(cu), 202
