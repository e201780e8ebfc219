"""Code that runs on a compute unit: the Spark session on Ray and the Spark host actor.

Nothing here imports the web portal (`app`): a compute unit's nodes carry this package
and the jars, not the portal. Its subpackages follow the lifetimes of what they hold.

Modules:
- `contract.py` — the portal ↔ unit contract, written once: job kinds, the spec, states, names
- `third_party_patches.py` — every patch of RayDP's, Ray's and py4j's internals, version-guarded

Packages (each one's docstring lists its modules):
- `build/` — built at setup: the jars, the class-path jar, the JVMs' class archive
- `node/` — started with a unit's node: the Ray node, its waiter, the unit's first process
- `host/` — living in the Spark host: its session, HTTP API, authentication, warm-up
- `run/` — made per run: the pipeline, its steps, logs, lineage, its process and channel
"""
