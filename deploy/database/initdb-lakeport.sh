#!/bin/sh
# Run by the postgres image once, on an empty data directory (/docker-entrypoint-initdb.d/):
# Lakeport's database and its two roles, from lakeport-roles.sql, with the passwords compose passes.
# Not run here (no Docker engine); the SQL it runs is, by tests/test_deploy_database_roles.py.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v owner_password="$OWNER_ROLE_PASSWORD" -v portal_password="$PORTAL_ROLE_PASSWORD" \
  -f /lakeport/lakeport-roles.sql
