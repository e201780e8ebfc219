# The two commands a fresh machine needs:
#   make run   installs everything, then runs Lakeport on its local stack
#   make test  installs everything, then runs the whole test suite (browser tests included)
.PHONY: setup run test e2e deploy-check bench

setup:
	@bash scripts/setup.sh

run: setup
	.venv/bin/python -m devstack

test: setup
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/python -m pytest

# The browser suite alone; with BASE_URL (and E2E_USER, E2E_PASSWORD, E2E_S3_*: e2e/target.py)
# against that deployment instead of a local stack of its own.
e2e: setup
	BASE_URL="$(BASE_URL)" .venv/bin/python -m pytest e2e

# An operator's check of a deployment, step by step with what to fix (e2e/deploy_check.py,
# deploy/README.md); without BASE_URL on a local stack of its own.
deploy-check: setup
	BASE_URL="$(BASE_URL)" .venv/bin/python -m e2e.deploy_check

bench: setup
	.venv/bin/python -m bench
