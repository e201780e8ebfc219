"""Lakeport's benchmarks (not tests): warm latency, throughput, cold start and result paging,
each against a baseline measured in the same run. `python -m bench --help`; see bench/README.md.

Modules:
- `__main__.py` — `python -m bench`: runs the chosen benchmarks, prints a summary
- `harness.py` — what every benchmark stands on: the local stack, a unit, timed runs
- `local_pyspark.py` — the baseline: plain PySpark `local[N]` bound to the same catalog
- `paging.py` — result paging of a 100-million-row table
- `groundwork.py` — a run's token and warehouse check side by side, with round trips added
- `cold.py` — cold start: a new unit → its first run COMPLETED
- `pool.py` — a start from the warm pool
- `warm.py` — warm latency: Run → COMPLETED on a warm unit
- `idle_memory.py` — what a warm unit holds while it runs nothing
- `sandbox.py` — what a local unit's sandbox costs a run
- `throughput.py` — TPC-H Q1 and its write, against plain PySpark
- `console.py` — the SQL console: TPC-H Q1 from the click to its first page, against plain PySpark
- `growth.py` — how a run's time grows with the data (scale factors 0.1, 1, 3)
- `portal_load.py` — 300 simulated users polling the portal under gunicorn
- `publish.py` — a run publishing three named tables, against run-only results
- `checks.py` — quality checks on a 6-million-row named output, against none
- `incremental.py` — a run reading 1% new rows with changes(), against the full read
- `compaction.py` — Q1 over 500 small files, before and after the worker compacts them
"""
