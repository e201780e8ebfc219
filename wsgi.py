"""WSGI entry point: `gunicorn wsgi:app`. Configuration comes from the environment (see app/config.py).

The web processes start no background work: `flask --app wsgi lakeport worker` does it (app/worker.py).
"""

from app import create_app

app = create_app()
