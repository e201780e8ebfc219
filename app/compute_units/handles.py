"""A unit's cluster: its backend (by the unit's kind) and its handle, as recorded (for pages:
nothing is called) or with its secrets restored (the cluster's token from where the cluster keeps
it, the Spark host secret derived again) for the worker and the door to reach it."""

from __future__ import annotations

import json

from flask import current_app

from app.compute_units.backends import backend_for
from app.models import ComputeUnit
from app.ray_clusters.base import ClusterBackend, ClusterHandle
from app.spark_host.client import with_spark_host_secret


def recorded_handle(cu: ComputeUnit) -> ClusterHandle | None:
    """The cluster's handle as recorded, without its secrets (for pages: nothing is called)."""
    data = json.loads(cu.handle or "{}")
    return ClusterHandle(**data) if data else None


def handle_of(cu: ComputeUnit) -> ClusterHandle | None:
    """The cluster's handle, with its token restored from where the cluster keeps it and the
    unit's Spark host secret derived again."""
    handle = recorded_handle(cu)
    return with_secrets(cu, handle) if handle else None


def with_secrets(cu: ComputeUnit, handle: ClusterHandle) -> ClusterHandle:
    return with_spark_host_secret(
        backend_of(cu).restore_token(handle), current_app.config["SECRET_KEY"]
    )


def backend_of(cu: ComputeUnit) -> ClusterBackend:
    return backend_for(cu.kind, current_app.config)
