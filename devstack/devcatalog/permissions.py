"""Users and warehouse grants: the part of Lakekeeper's Management API that its OpenFGA
authorizer adds and the portal uses (management-open-api.yaml, tags `user` and
`permissions-openfga`).

- `POST /user` registers the caller from its token (self-provisioning: `id` absent or the
  caller's own); registering someone else needs the server's admin, which nobody here is.
- `GET /whoami` answers the caller's user record, registering the caller first if needed
  (Lakekeeper registers users at their first catalog call).
- `GET|POST /permissions/warehouse/{id}/assignments` read and change a warehouse's grants
  (users only: the dev catalog has no roles). Allowed to project admins and to the
  warehouse's owners and `manage_grants` holders (checked in `app`, see `auth`).
"""
from __future__ import annotations

import uuid

from flask import Blueprint, current_app, request

from app.lakekeeper import WAREHOUSE_RELATIONS
from devstack.devcatalog.auth import caller
from devstack.devcatalog.errors import CatalogError, bad_request, warehouse_not_found

permissions = Blueprint("permissions", __name__, url_prefix="/management/v1")



def _store():
    return current_app.extensions["devcatalog"].store


@permissions.before_request
def scoped_tokens_change_no_grants():
    # An execution's warehouse-scoped token may register its own user, never change grants.
    if caller().scope.restricted and request.method == "POST" and request.endpoint != "permissions.provision_user":
        raise CatalogError(403, "WarehouseActionForbidden", "A warehouse-scoped token may not change grants")


def _register_caller(how: str) -> bool:
    """Save the caller's user record from its token's claims; True if it was new."""
    claims = caller().claims
    name = claims.get("name") or claims.get("preferred_username")
    # Lakekeeper takes a token without a person's name for an application's.
    user_type = "human" if name else "application"
    return _store().save_user(caller().user_id, str(name or claims.get("sub")), claims.get("email"), user_type, how)


@permissions.post("/user")
def provision_user():
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")
    user_id = body.get("id")
    if user_id is not None and user_id != caller().user_id:
        raise CatalogError(
            403, "ServerActionForbidden",
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


def _assignment_to_api(relation: str, user_id: str) -> dict:
    return {"type": relation, "user": user_id}


def _assignments(raw: object, field: str) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"'{field}' must be a list of assignments")
    pairs = []
    for item in raw:
        if not isinstance(item, dict) or item.get("type") not in WAREHOUSE_RELATIONS:
            raise bad_request(f"Each assignment in '{field}' needs a 'type', one of {', '.join(sorted(WAREHOUSE_RELATIONS))}")
        user, role = item.get("user"), item.get("role")
        if (user is None) == (role is None):
            raise bad_request("An assignment names exactly one of 'user' and 'role'", "InvalidAssignee")
        if role is not None:
            raise CatalogError(501, "RolesNotSupported", "The dev catalog has no roles: assign users")
        if not isinstance(user, str) or "~" not in user:
            raise bad_request(f"'{user}' is not a user id (<idp>~<subject>)", "InvalidUserId")
        pairs.append((item["type"], user))
    return pairs


@permissions.get("/permissions/warehouse/<uuid:warehouse_id>/assignments")
def warehouse_assignments(warehouse_id: uuid.UUID):
    _existing_warehouse(warehouse_id)
    wanted = set(request.args.getlist("relations")) or WAREHOUSE_RELATIONS
    if not wanted <= WAREHOUSE_RELATIONS:
        raise bad_request(f"relations must be among {', '.join(sorted(WAREHOUSE_RELATIONS))}")
    grants = [_assignment_to_api(relation, user) for relation, user in _store().grants(warehouse_id)
              if relation in wanted]
    return {"assignments": grants}


@permissions.post("/permissions/warehouse/<uuid:warehouse_id>/assignments")
def update_warehouse_assignments(warehouse_id: uuid.UUID):
    _existing_warehouse(warehouse_id)
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")
    writes, deletes = _assignments(body.get("writes"), "writes"), _assignments(body.get("deletes"), "deletes")
    _store().update_grants(warehouse_id, writes, deletes)
    return "", 204
