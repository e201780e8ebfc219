from __future__ import annotations

from flask import Response, abort, flash, redirect, render_template, request, url_for
from flask_login import current_user
from htmx_flask import make_response

from app.db import get_db, get_owned_or_404
from app.iceberg_catalogs import ResultReadError
from app.models import Warehouse
from app.table_pages import canonical_page_url, table_page_context
from app.warehouses import bp, forms, local_stack, queries, service, sharing
from app.warehouses.probe_limits import ProbesLimited
from app.warehouses.service import WarehouseActionError
from app.web import SharesPanel, redirect_to, shares_context


@bp.context_processor
def form_choices() -> dict:
    return {"flavors": forms.FLAVORS}


def _to_detail(warehouse_id: int):
    return redirect_to(url_for("warehouses.detail", warehouse_id=warehouse_id))


@bp.get("/")
def index():
    return render_template(
        "warehouses/index.html",
        warehouses=queries.user_warehouses(current_user),
        shared=sharing.shared_with(current_user),
    )


def _register_page(values: dict, errors: dict, status: int = 200):
    return render_template(
        "warehouses/new.html",
        values=values,
        errors=errors,
        storage_hint=local_stack.storage_hint(current_user),
        development_keys=local_stack.development_keys(current_user),
    ), status


@bp.get("/new")
def new():
    return _register_page(forms.initial_values(), {})


@bp.post("/validate/<field>")
def validate_field(field: str):
    if field not in forms.CHECKS or field in forms.SECRET_FIELDS:
        abort(404)
    return render_template(
        "warehouses/_field_error.html", field=field, message=forms.check_one(field, request.form)
    )


@bp.post("/test-connection")
def test_connection():
    storage, errors = forms.parse_storage_form(request.form, fields=forms.PROBE_FIELDS)
    if errors:
        return render_template("warehouses/_probe_result.html", report=None, errors=errors), 422
    try:
        report = service.test_connection(storage, current_user)
    except WarehouseActionError as error:
        return render_template(
            "warehouses/_probe_result.html", report=None, errors={error.field: error.message}
        ), 422
    except ProbesLimited as limited:
        return render_template(
            "warehouses/_probe_result.html", report=None, errors={"form": limited.message}
        ), 429
    return render_template("warehouses/_probe_result.html", report=report, errors={})


@bp.post("/")
def create():
    storage, errors = forms.parse_storage_form(request.form)
    if not errors:
        try:
            warehouse = service.register(current_user, storage)
        except WarehouseActionError as error:
            errors[error.field or "form"] = error.message
        else:
            flash(f"Warehouse {warehouse.name} is registered.", "success")
            return redirect(url_for("warehouses.detail", warehouse_id=warehouse.id))
    # Re-render without the secret: it is never sent back to the browser.
    values = {**forms.read_form(request.form), "secret_access_key": ""}
    return _register_page(values, errors, 422)


@bp.get("/<int:warehouse_id>")
def detail(warehouse_id: int):
    """The owner's page, or (for a user it is shared with) its tables and who has it."""
    warehouse = sharing.accessible_or_404(warehouse_id)
    return render_template(
        "warehouses/detail.html", warehouse=warehouse, **_shares_context(warehouse)
    )


SHARES_PANEL = SharesPanel(
    thing="warehouse",
    levels=sharing.LEVELS,
    default_level="read",
    revoke_effect="New runs and pages are refused at once; a running run's next catalog call too.",
    stays_yours="Credentials, rotation and closing stay yours.",
)


def _shares_context(warehouse: Warehouse, errors: dict | None = None, values=None) -> dict:
    return shares_context(
        SHARES_PANEL,
        warehouse,
        access=sharing.access_of(current_user, warehouse),
        shares=sharing.shares_of(warehouse),
        can_share=warehouse.status == "active",
        errors=errors,
        values=values,
    )


def _shares_panel(warehouse: Warehouse, errors: dict | None = None, values=None, status: int = 200):
    return render_template(
        "_shares.html", warehouse=warehouse, **_shares_context(warehouse, errors, values)
    ), status


@bp.post("/<int:warehouse_id>/shares")
def share(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    try:
        sharing.share(warehouse, request.form)
    except sharing.ShareRefused as refusal:
        return _shares_panel(
            warehouse, {refusal.field or "form": refusal.message}, request.form, 422
        )
    return _shares_panel(warehouse)


@bp.post("/<int:warehouse_id>/shares/<int:share_id>/revoke")
def revoke_share(warehouse_id: int, share_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    try:
        sharing.revoke(warehouse, share_id)
    except sharing.ShareRefused as refusal:
        return _shares_panel(warehouse, {"form": refusal.message}, status=422)
    return _shares_panel(warehouse)


@bp.get("/<int:warehouse_id>/contents")
def contents(warehouse_id: int):
    warehouse = sharing.accessible_or_404(warehouse_id)
    try:
        namespaces, error = queries.browse(warehouse), None
    except WarehouseActionError as failure:
        namespaces, error = [], failure.message
    return render_template(
        "warehouses/_contents.html",
        warehouse=warehouse,
        namespaces=namespaces,
        error=error,
        is_internal=queries.is_internal,
    )


@bp.get("/<int:warehouse_id>/tables/<name>")
def table(warehouse_id: int, name: str):
    """A table's page: schema, properties, snapshots, size, and its first rows (paged)."""
    warehouse = sharing.accessible_or_404(warehouse_id)
    if not queries.valid_table_name(name):
        abort(404)
    context = table_page_context(
        lambda page, size: queries.preview(warehouse, name, page, size),
        name,
        url_for("warehouses.table", warehouse_id=warehouse.id, name=name),
    )
    if request.htmx:
        return make_response(
            render_template("executions/_table_page.html", **context),
            push_url=canonical_page_url(context),
        )
    try:
        overview, error = queries.overview(warehouse, name), None
    except ResultReadError as failure:
        overview, error = None, failure.args[0]
    links = queries.property_links(overview.properties, current_user) if overview else {}
    return render_template(
        "warehouses/table.html",
        warehouse=warehouse,
        name=name,
        overview=overview,
        overview_error=error,
        links=links,
        **context,
    )


def _action(warehouse_id: int, action, success: str):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    try:
        stopped = action(warehouse)
    except WarehouseActionError as error:
        flash(error.message, "error")
    else:
        if stopped:
            success += f" {stopped} execution{'s' if stopped > 1 else ''} writing into it stopped."
        flash(success.format(name=warehouse.name), "success")
    return _to_detail(warehouse_id)


@bp.post("/<int:warehouse_id>/rename")
def rename(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    new_name = (request.form.get("name") or "").strip()
    message = forms.validate_new_name(new_name)
    if message is None:
        try:
            service.rename(warehouse, new_name)
        except WarehouseActionError as error:
            message = error.message
    if message:
        return render_template(
            "warehouses/_rename.html", warehouse=warehouse, value=new_name, error=message
        ), 422
    flash(f"Renamed to {warehouse.name}.", "success")
    return _to_detail(warehouse_id)


@bp.post("/<int:warehouse_id>/credentials")
def rotate_credentials(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    values = forms.read_form(request.form)
    errors = forms.validate(values, fields=["access_key_id", "secret_access_key"])
    report = None
    if not errors:
        try:
            report = service.rotate_credentials(
                warehouse, values["access_key_id"], values["secret_access_key"]
            )
        except WarehouseActionError as error:
            errors["form"] = error.message
    status = 422 if errors else 200
    return render_template(
        "warehouses/_rotate.html",
        warehouse=warehouse,
        errors=errors,
        report=report,
        access_key_id=values["access_key_id"],
    ), status


@bp.post("/<int:warehouse_id>/deactivate")
def deactivate(warehouse_id: int):
    return _action(warehouse_id, service.deactivate, "Warehouse {name} is deactivated.")


@bp.post("/<int:warehouse_id>/activate")
def activate(warehouse_id: int):
    return _action(warehouse_id, service.activate, "Warehouse {name} is active again.")


@bp.post("/<int:warehouse_id>/archive")
def archive(warehouse_id: int):
    return _action(
        warehouse_id,
        service.archive,
        "Warehouse {name} is archived: no new executions; its tables stay readable.",
    )


@bp.post("/<int:warehouse_id>/purge")
def purge(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    name = warehouse.name
    try:
        outcome = service.purge(warehouse, request.form.get("confirm_name", ""))
    except WarehouseActionError as error:
        # What was typed stays, so a near miss can be corrected rather than retyped.
        return render_template(
            "warehouses/_purge.html",
            warehouse=warehouse,
            error=error.message,
            typed=request.form.get("confirm_name", ""),
        ), 422
    removed = (
        f"{outcome.tables_dropped} tables and {outcome.namespaces_dropped} namespaces were removed"
    )
    if outcome.pending:
        flash(
            f"Warehouse {name} is being purged: {removed}; Lakekeeper still deletes their files, and the "
            "warehouse goes once it has.",
            "info",
        )
        return _to_detail(warehouse_id)
    flash(f"Warehouse {name} is purged: {removed}.", "success")
    return redirect_to(url_for("warehouses.index"))


@bp.get("/<int:warehouse_id>/closing")
def closing(warehouse_id: int):
    """The closing notice, polled while the worker finishes closing the warehouse. A warehouse
    that is gone (its purge finished), like one that is not the user's, answers 404 and sends
    the page to the list."""
    warehouse = get_db().get(Warehouse, warehouse_id)
    if warehouse is None or warehouse.owner_id != current_user.id:
        return Response("", 404, headers={"HX-Redirect": url_for("warehouses.index")})
    return render_template("warehouses/_closing.html", warehouse=warehouse)
