-- Lakeport's PostgreSQL database and its two roles (deploy/README.md, "The database's two roles").
-- Run once, as a superuser, before the first migration:
--
--   psql -v ON_ERROR_STOP=1 -v owner_password=... -v portal_password=... -f lakeport-roles.sql
--
-- The owner role owns every table and runs the migrations (LAKEPORT_DATABASE_OWNER_URL); the portal
-- role is what the portal and the worker connect as (LAKEPORT_DATABASE_URL). The first migration run
-- as the owner grants the portal role its rows and nothing more (app/database_roles.py): read and
-- append the audit trail, no schema change, no trigger switched off. Neither role is a superuser,
-- may create roles or databases, or is a member of the other. Other names: -v owner_role=...
-- -v portal_role=... -v database=...

\if :{?owner_role} \else \set owner_role lakeport_owner \endif
\if :{?portal_role} \else \set portal_role lakeport_portal \endif
\if :{?database} \else \set database lakeport \endif

CREATE ROLE :"owner_role" LOGIN PASSWORD :'owner_password' NOSUPERUSER NOCREATEDB NOCREATEROLE;
CREATE ROLE :"portal_role" LOGIN PASSWORD :'portal_password' NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
CREATE DATABASE :"database" OWNER :"owner_role";

\connect :"database"
-- Before PostgreSQL 15 every role could create tables in schema public: the owner takes the schema
-- and nobody else may (the migration also checks that the portal role cannot).
ALTER SCHEMA public OWNER TO :"owner_role";
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
