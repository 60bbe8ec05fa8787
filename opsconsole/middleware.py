"""Request ids, and a retryable answer when the database is out of reach.

``RequestIdMiddleware`` gives every request an id (the caller's ``X-Request-ID`` when it is a
sane token, else a new one), returns it in the response header and puts it on every log line
written while the request runs (``opsconsole.logging``), so an operator can find the traceback
behind a person's "it said error 5f3a…".

``DatabaseUnavailableMiddleware`` turns a lost or refused database connection into ``503`` with
``Retry-After``: JSON for the API (its published ``Unavailable`` answer, ``opsconsole.api.answers``:
an automation retries a 503), a page for people. A transaction
the database aborted for a deadlock or a serialization failure, still so after being run again
(``ledger.core.contention``), is ``503 busy`` instead: the database is there, the request lost to
another one, and it is logged as that. Any other error stays a 500, logged with its traceback by
``django.request``.

``TimeZoneMiddleware`` shows times in the person's time zone: the browser's, which
``static/timezone.js`` keeps in the ``tz`` cookie; UTC without one, or for a name that is not a
time zone.
"""

import logging
import re
import uuid
import zoneinfo
from functools import cache

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils import timezone

from ledger.core.contention import contention
from opsconsole.api import answers
from opsconsole.logging import request_id

logger = logging.getLogger("ledger")

RETRY_AFTER_SECONDS = 5
_SANE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        given = request.META.get("HTTP_X_REQUEST_ID", "")  # not request.headers, which maps every header
        request.request_id = given if _SANE_ID.match(given) else uuid.uuid4().hex
        token = request_id.set(request.request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id.reset(token)
        response["X-Request-ID"] = request.request_id
        return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        if what := contention(exception):
            logger.warning(
                "database busy: %s persisted; answered 503 busy", what, extra={"contention": what, "path": request.path}
            )
            return busy(request)
        return unavailable(request)


def unavailable(request):
    """503 with Retry-After: JSON under the API, the friendly page elsewhere."""
    return _retry_later(request, "unavailable", "The ledger's database cannot be reached right now.")


def busy(request):
    """503 ``busy`` with Retry-After: the database aborted the request's transaction (a deadlock or a
    serialization failure) again after it was run again. Nothing of it was kept."""
    return _retry_later(
        request,
        "busy",
        "The ledger's database was too busy to finish this request "
        "(it lost a lock to other requests, and again when run again); nothing of it was kept.",
    )


def _retry_later(request, status: str, why: str):
    if request.path.startswith("/api/"):
        response = answers.respond(
            answers.Unavailable(
                status=status,
                detail=(
                    f"{why} Retry in {RETRY_AFTER_SECONDS} seconds: resending is safe (what was recorded comes back "
                    "as a duplicate)."
                ),
            ),
            503,
        )
    else:
        # Rendered without the request: its context processors would ask the database for the user.
        page = render_to_string(
            "503.html",
            {
                "retry_after": RETRY_AFTER_SECONDS,
                "busy": status == "busy",
                "request_id": getattr(request, "request_id", ""),
            },
        )
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


TIME_ZONE_COOKIE = "tz"


@cache
def _known_zones() -> frozenset[str]:
    # Only names the time zone database lists: ZoneInfo() alone would also try any path-like key.
    return frozenset(zoneinfo.available_timezones())


def browser_zone(name: str) -> zoneinfo.ZoneInfo | None:
    """The time zone called ``name`` (an IANA name, such as the browser reports), else None."""
    # No name (no cookie: every API call) needs no list; reading it costs ~20 ms once per process.
    if not name or name not in _known_zones():
        return None
    return zoneinfo.ZoneInfo(name)


class TimeZoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = browser_zone(request.COOKIES.get(TIME_ZONE_COOKIE, ""))
        if zone is None:
            timezone.deactivate()  # settings.TIME_ZONE: UTC
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
