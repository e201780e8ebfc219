"""A compute unit's Spark host, as the portal reaches it: its transport (`client`) and its
warm-up (`warmup`). Features reach a unit through app/compute_units/door.py, which uses these.

Modules:
- `client.py` — the signed HTTP transport to the host; its secret; its figures; stopping it
- `warmup.py` — the unit's warm Spark session: one bootstrap per unit
"""
