"""Started with a unit's Ray node and living as long as it: standard library mostly, small.

- `unit_init.py` — the first process in a local unit's sandbox: its nodes and Spark host launcher
- `ray_node.py` — one Ray node, with only the processes a unit uses
- `node_waiter.py` — what `ray start --block` becomes once the node runs
- `idle_agent.py` — stands in for Ray's agents on a unit without a dashboard
"""
