"""The local stack: Lakeport and every service it needs, on loopback ports (`make run`).

Modules:
- `__main__.py` — `python -m devstack`, i.e. `make run`
- `stack.py` — starts every service on loopback ports, the worker included
- `process.py` — child processes: start, wait until ready, stop cleanly
- `oidc_provider.py` — the OpenID Connect provider (node-oidc-provider, `oidc/server.mjs`)
- `seaweedfs.py` — SeaweedFS: S3 with real SigV4 identities, and its Iceberg REST catalog
- `database.py` — the stack's own database: PostgreSQL when one answers, else SQLite

Packages:
- `devcatalog/` — the Lakekeeper-compatible dev catalog
"""
