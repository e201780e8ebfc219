"""gunicorn's settings for the portal: the image's command and the portal-load benchmark
(bench/portal_load.py) both serve with these. Command-line options override them (the
benchmark binds a free loopback port)."""

bind = "0.0.0.0:8000"
wsgi_app = "wsgi:app"
# Two processes of four threads: requests mostly wait on the database, the catalog or a unit's
# dashboard, and a compute unit needs the machine's cores more than the portal does.
workers = 2
threads = 4
accesslog = "-"
# Pages poll every 1 to 5 s: keep their connections between polls (gunicorn's default of 2 s
# closes them in between, and a client that reuses one as it closes gets a reset).
keepalive = 75
