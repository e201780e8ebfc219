"""Lakeport's benchmarks (not tests): warm latency, throughput, cold start and result paging,
each against a baseline measured in the same run. `python -m bench --help`; see bench/README.md."""
