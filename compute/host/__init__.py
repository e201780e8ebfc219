"""Living in the unit's Spark host, for the unit's lifetime: the warm session and what it keeps.

- `spark_host.py` — the warm Spark session as a detached Ray actor: the run table, runs, cancel
- `start_spark_host.py` — the Ray Job entrypoint that starts the Spark host
- `host_http.py` — the host's HTTP API
- `host_auth.py` — signed requests, proven answers, sealed arguments (the portal uses it too)
- `spark_session.py` — RayDP session factory: JVM flags, jars, catalogs, the write warm-up
- `spare_sessions.py` — a warehouse session per run, one made ahead per warehouse
- `catalog_cache.py` — per-warehouse Spark catalog bindings
- `warm_up_catalog.py` — the loopback Iceberg REST catalog the warm-up writes to
- `scratch_s3.py` — the loopback in-memory S3 endpoint the warm-up writes to
- `loopback_server.py` — a throwaway HTTP server on the unit's loopback for both
"""
