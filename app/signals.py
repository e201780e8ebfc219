"""Signals between features, so that one need not import another (Flask's own signals use blinker).

`warehouse_closing` is sent by the warehouses service when a warehouse stops taking writes
(deactivated, archived, about to be purged), before its access is taken away; `why` says how
("was archived"). Receivers stop what writes into it and return how many things they stopped
(executions connects `stopping.stop_in_warehouse`). Without it, warehouses would import
executions, which imports workflows, which imports warehouses.
"""
from __future__ import annotations

from blinker import Namespace

_signals = Namespace()

warehouse_closing = _signals.signal("warehouse-closing")


def close_warehouse(warehouse, why: str) -> int:
    """Send `warehouse_closing`; how many things its receivers stopped."""
    return sum(stopped or 0 for _, stopped in warehouse_closing.send(warehouse, why=why))
