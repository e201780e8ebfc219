"""A compute unit's Spark host, as the portal reaches it.

- `door`: the one door to a unit that runs, watches and cancels work on it (use this);
- `warmup`: the host's bootstrap and readiness, one at a time per unit;
- `client`: the signed HTTP transport to the host (compute/host_auth.py, compute/host_http.py).
"""
