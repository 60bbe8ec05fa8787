"""Every request counted and timed by route template, method and status, and written to the JSON log
as one access line (gunicorn writes no access log of its own).

- ``opsconsole_http_requests_total{route,method,status}``: requests answered;
- ``opsconsole_http_request_duration_seconds{route,method,status}``: how long the answer took to
  build (a streamed body, such as a CSV export, is timed until its first byte).

``route`` is the URL pattern that matched, written as ``/api/v1/operations/{key}``: never the path,
whose keys would leak data and make one series per operation. A path that matched nothing is
``(unmatched)``, a static file ``(static)``. ``method`` is one of the methods the site answers, else
``other``: a client choosing methods must not choose series either.

Under gunicorn each worker counts in files of its own, in the directory ``gunicorn.conf.py`` makes
for the run (prometheus-client's multiprocess mode); ``/metrics`` sums them (``collector``).
"""

import logging
import os
import re
import time

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from opsconsole import errors

logger = logging.getLogger("opsconsole.access")

REGISTRY = CollectorRegistry(auto_describe=False)
LABELS = ("route", "method", "status")
REQUESTS = Counter(
    "opsconsole_http_requests", "Requests answered, by route template, method and status.", LABELS, registry=REGISTRY
)
DURATION = Histogram(
    "opsconsole_http_request_duration_seconds",
    "Time to answer a request, by route template, method and status.",
    LABELS,
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def route_of(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None or match.url_name == errors.API_UNMATCHED:
        return "(static)" if request.path_info.startswith("/" + settings.STATIC_URL.lstrip("/")) else "(unmatched)"
    return "/" + _PARAMETER.sub(r"{\1}", match.route)


def collector():
    """What ``/metrics`` shows of the requests: the sum over gunicorn's workers, or this process's own."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        return MultiProcessCollector(None, path=directory)
    return REGISTRY


class RequestMetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        began = time.perf_counter()
        response = self.get_response(request)
        seconds = time.perf_counter() - began
        route, method, status = route_of(request), request.method, response.status_code
        if method not in METHODS:
            method = "other"
        REQUESTS.labels(route, method, str(status)).inc()
        DURATION.labels(route, method, str(status)).observe(seconds)
        # The request id comes from the log context (RequestIdMiddleware runs outside this one).
        # The message names the request; its figures are fields (the JSON log writes them beside it).
        logger.info(
            "%s %s",
            method,
            route,
            extra={"method": method, "route": route, "status": status, "duration_ms": round(seconds * 1000, 2)},
        )
        return response
