#!/usr/bin/env bash
# Installs everything Lakeport and its local stack need, idempotently:
# system packages (Chromium for browser tests, a JDK for Spark), the Python venv,
# npm packages (htmx, Pico CSS, the dev identity provider) and the Spark jars.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

step() { printf '\n== %s\n' "$*"; }

# --- system packages -------------------------------------------------------
need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)  # javac builds compute/java
command -v node >/dev/null || need_apt+=(nodejs npm)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)  # local compute units run sandboxed
command -v socat >/dev/null || need_apt+=(socat)       # ... and are reached through socat bridges
if [ ${#need_apt[@]} -gt 0 ]; then
  step "installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- Python ----------------------------------------------------------------
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  step "installing Python packages into .venv"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  # pip's chatter goes to a log that is shown only when the install fails.
  log=.venv/pip-install.log
  if ! { .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[dev]'; } > "$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -40
    echo "installing Python packages failed (full log: $log)" >&2
    exit 1
  fi
  .venv/bin/python -c "import flask, ray, raydp, pyspark, pyiceberg"
  rm -f .venv/.installed-*; touch "$stamp"
fi

# --- npm: front-end assets and the dev identity provider -------------------
lockstamp=node_modules/.installed-$(sha256sum package-lock.json | cut -c1-16)
if [ ! -f "$lockstamp" ]; then
  step "installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
  touch "$lockstamp"
fi
mkdir -p app/static/vendor
cp node_modules/htmx.org/dist/htmx.min.js app/static/vendor/htmx.min.js
cp node_modules/@picocss/pico/css/pico.min.css app/static/vendor/pico.min.css
# The workflow editor (CodeMirror 6), bundled by esbuild from assets/editor.js.
npm run --silent build

# --- Spark jars (Iceberg runtime, S3A) -------------------------------------
if [ -f scripts/fetch_jars.py ]; then
  .venv/bin/python scripts/fetch_jars.py
fi
# The one jar compute units' Spark JVMs take as their class path (compute/build/class_path_jar.py, about
# 10 s), then the class archive they start from (compute/build/class_archive.py): built once for these
# jars and this JDK from a training RayDP session, about 65 s. Without them the JVMs start as
# usual, only slower.
.venv/bin/python -m compute.build.class_archive_build \
  || echo "warning: the Spark class archive could not be built; compute units start their Spark sessions without it" >&2
echo "setup complete"
