"""WSGI entry point: `gunicorn wsgi:app`. Configuration comes from the environment (see app/config.py)."""
from app import create_app
from app.compute_units.lifecycle import start_supervisor

app = create_app()
# The serving process watches running compute units for death and idleness.
start_supervisor(app)
