# The two commands a fresh machine needs:
#   make run   installs everything, then runs Lakeport on its local stack
#   make test  installs everything, then runs the whole test suite (browser tests included)
.PHONY: setup run test bench

setup:
	@bash scripts/setup.sh

run: setup
	.venv/bin/python -m devstack

test: setup
	.venv/bin/python -m pytest

bench: setup
	.venv/bin/python -m bench
