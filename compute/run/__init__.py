"""Made per run: what one run of a job on the host does, and the process it runs in.

- `runs.py` — a run's record and progress, and the interruption of its Python code
- `jobs.py` — the function of each job kind the host runs (execution, comparison, maintenance)
- `pipeline.py` — runs one execution: steps, outputs, runtime stats, logs, lineage
- `publish.py` — named outputs: written on branches, published in one multi-table commit
- `checks.py` — quality checks: a named output's rows checked before the run publishes anything
- `step_code.py` — a step's code compiled and run, its errors in one line
- `console_capture.py` — what steps print, routed into the execution's log
- `record_tables.py` — the schemas of `runtime_stats` and `console_logs`
- `lineage.py` — tables and snapshots read, from Spark's plans; pinning a re-run's reads
- `iceberg_rest.py` — the run's pyiceberg catalogs: the run's token, vended credentials
- `comparison.py` — rows in one output and not the other
- `maintenance.py` — snapshot expiry and orphan-file clean-up of a warehouse's datasets
- `query.py` — one SQL statement of the console, read-only unless asked, its rows bounded
- `forked_runs.py` — the owner's runs, each in a child forked from the warm host
- `sandboxed_runs.py` — a run of another user's workflow: a fresh process in a nested sandbox
- `run_channel.py` — what a run's process and the host say to each other
"""
