"""WSGI entry point: `gunicorn wsgi:app`. Configuration comes from the environment (see app/config.py)."""
from app import create_app

app = create_app()
