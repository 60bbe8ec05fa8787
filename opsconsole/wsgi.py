"""The WSGI application, its routes imported and indexed as a worker boots (not at its first request)."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver, reverse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opsconsole.settings")

application = get_wsgi_application()

# The URLconf (the API's routes and their pydantic models, the console's views) would otherwise be
# imported and indexed by a worker's first request: ~250 ms of it, a slow answer after every start
# of every gunicorn worker (bench/idle_latency.py with LATENCY_WARMUP=0). Done here, as the worker
# boots, before it accepts a connection.
get_resolver().resolve("/metrics")  # the last route: every include before it is imported on the way
reverse("metrics")  # and every route indexed
