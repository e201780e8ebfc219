"""Signals between features, so that one need not import another (Flask's own signals use blinker).

`warehouse_closing` is sent by the warehouses service when a warehouse stops taking writes
(deactivated, archived, about to be purged), before its access is taken away; `why` says how
("was archived"). Receivers stop what writes into it and return how many things they stopped
(executions connects `stopping.stop_in_warehouse`). Without it, warehouses would import
executions, which imports workflows, which imports warehouses.

`shares_changed` is sent with a warehouse or a workflow once a share of it was revoked or its
level changed (committed). Receivers stop what the remaining shares no longer allow
(executions connects `stopping.stop_unshared`) and return how many things they stopped.
"""

from __future__ import annotations

from blinker import Namespace

_signals = Namespace()

warehouse_closing = _signals.signal("warehouse-closing")
shares_changed = _signals.signal("shares-changed")


def close_warehouse(warehouse, why: str) -> int:
    """Send `warehouse_closing`; how many things its receivers stopped."""
    return sum(stopped or 0 for _, stopped in warehouse_closing.send(warehouse, why=why))


def enforce_shares(thing) -> int:
    """Send `shares_changed` for a warehouse or a workflow; how many things its receivers stopped."""
    return sum(stopped or 0 for _, stopped in shares_changed.send(thing))
