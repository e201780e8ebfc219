from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for
from flask_login import current_user
from werkzeug.exceptions import RequestEntityTooLarge

from app.db import get_owned_or_404
from app.models import Warehouse, WarehouseStatus, Workflow, WorkflowVersion

# The module, not the name: app.warehouses.service imports app.executions, which imports this
# module, so when the warehouses blueprint is loaded first the name does not exist yet here.
from app.warehouses import queries as warehouse_queries
from app.web import SharesPanel, redirect_to, shares_context
from app.workflows import bp, forms, queries, service, sharing, steps
from app.workflows.dataset_tables import DatasetError
from app.workflows.service import WorkflowActionError

# Room for the upload form's other fields and the multipart framing around the file.
UPLOAD_FORM_OVERHEAD_BYTES = 64 * 1024


@bp.context_processor
def workflow_context() -> dict:
    return {"step_kinds": steps.KINDS, "publish_modes": steps.MODES, "max_steps": steps.MAX_STEPS}


def _partial_wanted() -> bool:
    """An HTMX request gets just the partial; a history restore needs the whole page."""
    return bool(request.htmx) and not request.htmx.history_restore_request


@bp.get("/")
def index():
    return render_template(
        "workflows/index.html",
        workflows=queries.user_workflows(current_user),
        shared=sharing.shared_with(current_user),
    )


@bp.get("/new")
def new():
    return render_template("workflows/new.html", values={"name": "", "description": ""}, errors={})


@bp.post("/")
def create():
    values, errors = forms.parse_workflow_form(request.form)
    if not errors:
        try:
            workflow = service.create(current_user, values["name"], values["description"])
        except WorkflowActionError as error:
            errors[error.field or "form"] = error.message
        else:
            flash(
                f"Workflow {workflow.name} is created: add its steps and save the first version.",
                "success",
            )
            return redirect(url_for("workflows.edit", workflow_id=workflow.id))
    return render_template("workflows/new.html", values=values, errors=errors), 422


# --- Reading a workflow and its versions ---


def _show_version(workflow: Workflow, version: WorkflowVersion | None):
    template = "workflows/_version.html" if _partial_wanted() else "workflows/detail.html"
    return render_template(
        template,
        workflow=workflow,
        version=version,
        steps=service.steps_of(version),
        versions=queries.versions_of(workflow),
        **_shares_context(workflow),
    )


@bp.get("/<int:workflow_id>")
def detail(workflow_id: int):
    workflow = sharing.accessible_or_404(workflow_id)
    return _show_version(workflow, service.latest_version(workflow))


@bp.get("/<int:workflow_id>/versions/<int:number>")
def version(workflow_id: int, number: int):
    workflow = sharing.accessible_or_404(workflow_id)
    found = service.version_of(workflow, number)
    if found is None:
        abort(404)
    return _show_version(workflow, found)


@bp.post("/<int:workflow_id>/delete")
def delete(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    name = workflow.name
    try:
        service.delete(workflow)
    except WorkflowActionError as error:
        flash(error.message, "error")
        return redirect_to(url_for("workflows.detail", workflow_id=workflow_id))
    flash(f"Workflow {name} is deleted.", "success")
    return redirect_to(url_for("workflows.index"))


# --- Sharing: the owner shares and revokes; a sharee copies ---


SHARES_PANEL = SharesPanel(
    thing="workflow",
    levels=sharing.LEVELS,
    default_level="view",
    revoke_effect="They can no longer open or run it; what they ran stays theirs.",
    stays_yours="Editing, schedules and deleting stay yours.",
)


def _shares_context(workflow: Workflow, errors: dict | None = None, values=None) -> dict:
    return shares_context(
        SHARES_PANEL,
        workflow,
        access=sharing.access_of(current_user, workflow),
        shares=sharing.shares_of(workflow),
        errors=errors,
        values=values,
    )


def _shares_panel(workflow: Workflow, errors: dict | None = None, values=None, status: int = 200):
    return render_template("_shares.html", **_shares_context(workflow, errors, values)), status


@bp.post("/<int:workflow_id>/shares")
def share(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    try:
        sharing.share(workflow, request.form)
    except sharing.ShareRefused as refusal:
        return _shares_panel(
            workflow, {refusal.field or "form": refusal.message}, request.form, 422
        )
    return _shares_panel(workflow)


@bp.post("/<int:workflow_id>/shares/<int:share_id>/revoke")
def revoke_share(workflow_id: int, share_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    sharing.revoke(workflow, share_id)
    return _shares_panel(workflow)


@bp.post("/<int:workflow_id>/copy")
def copy(workflow_id: int):
    """A copy of a workflow shared with the user (or of their own), theirs to edit."""
    workflow = sharing.accessible_or_404(workflow_id)
    name = (request.form.get("name") or "").strip() or f"{workflow.name} copy"
    values, errors = forms.parse_workflow_form({"name": name, "description": ""})
    if errors:
        flash(next(iter(errors.values())), "error")
        return redirect_to(url_for("workflows.detail", workflow_id=workflow.id))
    try:
        made = sharing.copy(current_user, workflow, values["name"])
    except WorkflowActionError as error:
        flash(error.message, "error")
        return redirect_to(url_for("workflows.detail", workflow_id=workflow.id))
    flash(f"{made.name} is your copy of {workflow.name}: edit it as you like.", "success")
    return redirect_to(url_for("workflows.detail", workflow_id=made.id))


# --- The step editor: the form carries every step; each action answers with the whole, checked editor ---


def _editor(
    workflow: Workflow,
    step_list: list[steps.Step],
    base_version: int,
    check: steps.StepsCheck | None = None,
    message: str | None = None,
    status: int = 200,
    focus: str | None = None,
    news: str = "",
):
    """The editor, whole page or partial. `focus`: the control that takes the focus after an
    action (`step-<index>-<name|up|down|remove>`, `add-sql`), since the one the user pressed was
    swapped out with the form; `news`: what the action did, said by the page's live region (a
    partial updates the region, which stays outside the swapped form, out of band)."""
    partial = _partial_wanted()
    return render_template(
        "workflows/_editor.html" if partial else "workflows/edit.html",
        workflow=workflow,
        steps=step_list,
        base_version=base_version,
        check=check or steps.StepsCheck(workflow=[], steps={}),
        message=message,
        focus=focus,
        news=news,
        oob=partial,
    ), status


def _after_change(
    before: list[steps.Step], after: list[steps.Step], index: int, action: str
) -> tuple[str | None, str]:
    """Where the focus goes after step `index` of `before` was moved or removed, leaving `after`,
    and what to say. As WAI-ARIA's practice has it, a moved step keeps the focus on the button
    pressed (on the other one once it reaches an end, where the pressed one is disabled); after a
    removal, the step that took its place has it, else the one before, else Add SQL step. A
    change that changed nothing (an index out of range, a move past an end) says nothing."""
    if after == before:
        return None, ""
    name = before[index].name or f"step {index + 1}"
    if action == "remove":
        if not after:
            return "add-sql", f"Deleted {name}; the workflow has no steps."
        return f"step-{min(index, len(after) - 1)}-name", f"Deleted {name}."
    at = index + (-1 if action == "up" else 1)
    button = action
    if at in (0, len(after) - 1):
        button = "down" if at == 0 else "up"
    return f"step-{at}-{button}", f"Moved {name} to position {at + 1} of {len(after)}."


@bp.get("/<int:workflow_id>/edit")
def edit(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    step_list = service.steps_of(service.latest_version(workflow)) or [
        steps.starter_step("sql", [])
    ]
    return _editor(workflow, step_list, workflow.latest_version)


@bp.post("/<int:workflow_id>/editor/add/<any(sql, python):kind>")
def add_step(workflow_id: int, kind: str):
    workflow = get_owned_or_404(Workflow, workflow_id)
    step_list = forms.read_steps(request.form)
    said = {"message": f"A workflow has at most {steps.MAX_STEPS} steps."}
    if len(step_list) < steps.MAX_STEPS:
        step = steps.starter_step(kind, step_list)
        step_list.append(step)
        at = len(step_list) - 1
        said = {
            "focus": f"step-{at}-name",
            "news": f"Added step {at + 1}, a {steps.KINDS[step.kind]} step named {step.name}.",
        }
    return _editor(
        workflow,
        step_list,
        forms.read_base_version(request.form),
        check=steps.check_steps(step_list),
        **said,
    )


@bp.post("/<int:workflow_id>/editor/<int:index>/<any(up, down, remove):action>")
def change_step(workflow_id: int, index: int, action: str):
    workflow = get_owned_or_404(Workflow, workflow_id)
    before = forms.read_steps(request.form)
    step_list = (
        steps.removed(before, index)
        if action == "remove"
        else steps.moved(before, index, -1 if action == "up" else 1)
    )
    focus, news = _after_change(before, step_list, index, action)
    # Checked again: a move or a removal can leave a step reading one that no longer comes before it.
    return _editor(
        workflow,
        step_list,
        forms.read_base_version(request.form),
        check=steps.check_steps(step_list),
        focus=focus,
        news=news,
    )


@bp.post("/<int:workflow_id>/editor/<int:index>/check")
def check_step(workflow_id: int, index: int):
    """Inline check of one step as the user types (it needs the names of all steps)."""
    get_owned_or_404(Workflow, workflow_id)
    step_list = forms.read_steps(request.form)
    if index >= len(step_list):
        abort(404)
    names = [step.name for step in step_list]
    errors = steps.check_step(step_list[index], earlier=names[:index], later=names[index + 1 :])
    return render_template("workflows/_step_errors.html", index=index, errors=errors)


@bp.post("/<int:workflow_id>/edit")
def save(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    step_list = forms.read_steps(request.form)
    base_version = forms.read_base_version(request.form)
    try:
        saved = service.save_version(workflow, step_list, base_version)
    except WorkflowActionError as error:
        if error.field == "base_version":
            # Shown once: saving again makes these steps the next version.
            base_version = workflow.latest_version
        return _editor(
            workflow,
            step_list,
            base_version,
            check=steps.check_steps(step_list),
            message=error.message,
            status=422,
        )
    flash(f"Saved {workflow.name} as version {saved.version}.", "success")
    return redirect_to(url_for("workflows.detail", workflow_id=workflow.id))


# --- Data sources: uploads and sample data into a warehouse ---


@bp.url_value_preprocessor
def limit_upload_size(endpoint: str | None, _values: dict | None) -> None:
    # Runs before the before-request hooks, whose CSRF check reads the form: an oversized
    # body is refused before any of it is read.
    if endpoint == "workflows.upload_dataset":
        request.max_content_length = service.upload_limit_bytes() + UPLOAD_FORM_OVERHEAD_BYTES


@bp.errorhandler(RequestEntityTooLarge)
def upload_too_large(_error):
    return _data_sources(
        "workflows/_upload.html",
        status=413,
        upload_errors={"file": service.upload_limit_message()},
    )


def _data_sources(partial: str, status: int = 200, **context):
    """The data-sources page, or for HTMX just `partial`."""
    warehouses = warehouse_queries.user_warehouses(current_user)
    context = {
        "warehouses": warehouses,
        "active_warehouses": [w for w in warehouses if w.status == WarehouseStatus.ACTIVE],
        "upload_limit_mb": service.upload_limit_mb(),
        "upload_values": {},
        "upload_errors": {},
        "imported": None,
        "sample_values": {"scale_factor_text": "0.01"},
        "sample_errors": {},
        "sample_jobs": [
            (w, job) for w in warehouses if (job := queries.sample_data_job(current_user, w))
        ],
        **context,
    }
    template = partial if _partial_wanted() else "workflows/datasets.html"
    return render_template(template, **context), status


@bp.get("/datasets")
def data_sources():
    return _data_sources("workflows/datasets.html")


@bp.post("/datasets/upload")
def upload_dataset():
    values, errors = forms.parse_upload_form(request.form, request.files)
    imported = None
    if values["warehouse_id"] is not None:
        warehouse = get_owned_or_404(Warehouse, values["warehouse_id"])
        if not errors:
            try:
                imported = service.import_upload(
                    warehouse,
                    values["table_name"],
                    values["file"].stream,
                    values["file"].filename,
                    current_user,
                )
            except DatasetError as error:
                errors[error.field or "form"] = error.message
    return _data_sources(
        "workflows/_upload.html",
        status=422 if errors else 200,
        upload_values=values,
        upload_errors=errors,
        imported=imported,
    )


@bp.post("/datasets/sample")
def generate_sample_data():
    values, errors = forms.parse_sample_form(request.form)
    if values["warehouse_id"] is not None:
        warehouse = get_owned_or_404(Warehouse, values["warehouse_id"])
        if not errors:
            try:
                service.start_sample_data(current_user, warehouse, values["scale_factor"])
            except DatasetError as error:
                errors[error.field or "form"] = error.message
    return _data_sources(
        "workflows/_sample.html",
        status=422 if errors else 200,
        sample_values=values,
        sample_errors=errors,
    )


@bp.get("/datasets/sample/<int:warehouse_id>")
def sample_data_status(warehouse_id: int):
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    job = queries.sample_data_job(current_user, warehouse)
    if job is None:
        abort(404)
    return render_template("workflows/_sample_status.html", warehouse=warehouse, job=job)
