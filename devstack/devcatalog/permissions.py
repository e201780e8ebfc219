"""Users and warehouse grants: the part of Lakekeeper's Management API that its OpenFGA
authorizer adds and the portal uses (management-open-api.yaml, tags `user` and
`permissions-openfga`).

- `POST /user` registers the caller from its token (self-provisioning: `id` absent or the
  caller's own); registering someone else needs the server's admin, which nobody here is.
- `GET /whoami` answers the caller's user record, registering the caller first if needed
  (Lakekeeper registers users at their first catalog call).
- `GET|POST /permissions/warehouse/{id}/assignments` read and change a warehouse's grants, to
  users or to roles. Allowed to project admins and to the warehouse's owners and
  `manage_grants` holders (checked in `app`, see `auth`).
- `POST|GET /role`, `GET|DELETE /role/{id}` and `GET|POST /permissions/role/{id}/assignments`
  (its `assignee` users): roles and their members, for project admins (the portal's service
  identity makes a role per shared group). A user holds what its roles hold, read on every
  request, so a membership or grant taken away counts at the next call.
"""

from __future__ import annotations

import uuid

from flask import Blueprint, current_app, request

from app.lakekeeper.resources import WAREHOUSE_RELATIONS
from devstack.devcatalog.auth import caller
from devstack.devcatalog.errors import (
    CatalogError,
    bad_request,
    project_forbidden,
    warehouse_not_found,
)
from devstack.devcatalog.management import request_project_id

permissions = Blueprint("permissions", __name__, url_prefix="/management/v1")


def _store():
    return current_app.extensions["devcatalog"].store


@permissions.before_request
def scoped_tokens_change_no_grants():
    # An execution's warehouse-scoped token may register its own user, never change grants.
    if (
        caller().scope.restricted
        and request.method == "POST"
        and request.endpoint != "permissions.provision_user"
    ):
        raise CatalogError(
            403, "WarehouseActionForbidden", "A warehouse-scoped token may not change grants"
        )


def _register_caller(how: str) -> bool:
    """Save the caller's user record from its token's claims; True if it was new."""
    claims = caller().claims
    name = claims.get("name") or claims.get("preferred_username")
    # Lakekeeper takes a token without a person's name for an application's.
    user_type = "human" if name else "application"
    return _store().save_user(
        caller().user_id, str(name or claims.get("sub")), claims.get("email"), user_type, how
    )


@permissions.post("/user")
def provision_user():
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")
    user_id = body.get("id")
    if user_id is not None and user_id != caller().user_id:
        raise CatalogError(
            403,
            "ServerActionForbidden",
            f"{caller().user_id} may not provision other users: that needs the server's admin or operator",
        )
    existing = _store().user(caller().user_id)
    if existing is not None and not body.get("update-if-exists", False):
        return existing, 200
    created = _register_caller("create-endpoint")
    return _store().user(caller().user_id), 201 if created else 200


@permissions.get("/whoami")
def whoami():
    if _store().user(caller().user_id) is None:
        _register_caller("config-call-creation")
    return {**_store().user(caller().user_id), "is-instance-admin": False}


def _existing_warehouse(warehouse_id: uuid.UUID) -> None:
    if _store().get(warehouse_id) is None:
        raise warehouse_not_found(warehouse_id)


ROLE_HOLDER = "role:"


def _assignment_to_api(relation: str, holder: str) -> dict:
    if holder.startswith(ROLE_HOLDER):
        return {"type": relation, "role": holder.removeprefix(ROLE_HOLDER)}
    return {"type": relation, "user": holder}


def _assignments(raw: object, field: str) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"'{field}' must be a list of assignments")
    pairs = []
    for item in raw:
        if not isinstance(item, dict) or item.get("type") not in WAREHOUSE_RELATIONS:
            raise bad_request(
                f"Each assignment in '{field}' needs a 'type', one of {', '.join(sorted(WAREHOUSE_RELATIONS))}"
            )
        pairs.append((item["type"], _holder(item)))
    return pairs


def _holder(item: dict) -> str:
    """The grant's holder: a user id, or `role:<id>` of an existing role."""
    user, role = item.get("user"), item.get("role")
    if (user is None) == (role is None):
        raise bad_request("An assignment names exactly one of 'user' and 'role'", "InvalidAssignee")
    if role is not None:
        return ROLE_HOLDER + str(_existing_role(role))
    if not isinstance(user, str) or "~" not in user:
        raise bad_request(f"'{user}' is not a user id (<idp>~<subject>)", "InvalidUserId")
    return user


def _existing_role(raw: object) -> uuid.UUID:
    try:
        role_id = uuid.UUID(str(raw))
    except ValueError:
        raise bad_request(f"'{raw}' is not a role id", "InvalidRoleId") from None
    if _store().role(role_id) is None:
        raise CatalogError(404, "RoleNotFound", f"Role '{role_id}' not found")
    return role_id


def _project_admin_only() -> None:
    if not caller().project_admin:
        raise project_forbidden("Managing roles needs the project's admin")


@permissions.get("/permissions/warehouse/<uuid:warehouse_id>/assignments")
def warehouse_assignments(warehouse_id: uuid.UUID):
    _existing_warehouse(warehouse_id)
    # Every relation: Lakekeeper 0.13.3 answers 400 to a `relations` filter (app.py).
    grants = [
        _assignment_to_api(relation, user) for relation, user in _store().grants(warehouse_id)
    ]
    return {"assignments": grants}


@permissions.post("/permissions/warehouse/<uuid:warehouse_id>/assignments")
def update_warehouse_assignments(warehouse_id: uuid.UUID):
    _existing_warehouse(warehouse_id)
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")
    writes, deletes = (
        _assignments(body.get("writes"), "writes"),
        _assignments(body.get("deletes"), "deletes"),
    )
    _store().update_grants(warehouse_id, writes, deletes)
    return "", 204


@permissions.post("/role")
def create_role():
    _project_admin_only()
    body = request.get_json(silent=True)
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("name"), str)
        or not body["name"].strip()
    ):
        raise bad_request("A role needs a 'name'")
    return _store().add_role(request_project_id(), body["name"], body.get("description")), 201


@permissions.get("/role")
def list_roles():
    _project_admin_only()
    return {"roles": _store().roles(request_project_id()), "next-page-token": None}


@permissions.get("/role/<uuid:role_id>")
def get_role(role_id: uuid.UUID):
    _project_admin_only()
    return _store().role(_existing_role(role_id))


@permissions.delete("/role/<uuid:role_id>")
def delete_role(role_id: uuid.UUID):
    _project_admin_only()
    _store().delete_role(_existing_role(role_id))
    return "", 204


@permissions.get("/permissions/role/<uuid:role_id>/assignments")
def role_assignments(role_id: uuid.UUID):
    _project_admin_only()
    members = _store().role_members(_existing_role(role_id))
    return {"assignments": [{"type": "assignee", "user": user_id} for user_id in members]}


@permissions.post("/permissions/role/<uuid:role_id>/assignments")
def update_role_assignments(role_id: uuid.UUID):
    _project_admin_only()
    _existing_role(role_id)
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")

    def members(field: str) -> list[str]:
        raw = body.get(field) or []
        if not isinstance(raw, list) or any(
            not isinstance(item, dict) or item.get("type") != "assignee" for item in raw
        ):
            raise bad_request(f"'{field}' must be a list of assignee assignments")
        users = [_holder(item) for item in raw]
        if any(user.startswith(ROLE_HOLDER) for user in users):
            raise CatalogError(
                501, "NestedRolesNotSupported", "The dev catalog's roles have users as members"
            )
        return users

    _store().update_role_members(role_id, members("writes"), members("deletes"))
    return "", 204
