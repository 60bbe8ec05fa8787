"""What a load balancer asks: ``/healthz`` (the process answers) and ``/readyz`` (it can do its work).

``/readyz`` is ready when the database answers, every migration this code knows is applied, and the
sweep (the qcluster's every-minute job, ``ledger.sweep``) wrote its heartbeat within
``OPSCONSOLE_SWEEP_STALE_SECONDS`` (0: not asked). Knowing the migrations are applied is cached in
the process once true (a deploy migrates before new code serves), so a ready probe costs one
indexed read of one row.

Both answer one word, ``ok`` (200) or ``unavailable`` (503), whatever the cause: a probe is
unauthenticated, and which check failed would tell a stranger about the deployment. The cause goes
to the JSON log. ``ProbeMiddleware`` sits first in MIDDLEWARE and answers GET and HEAD of exactly
these paths itself, before anything that checks the Host header (a balancer probes an instance by
its address), redirects to HTTPS (it probes over plain HTTP), opens a session or counts the request
(probes every few seconds would drown the request metrics and the access log).
"""

import logging
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.db import DatabaseError
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpResponse
from django.utils import timezone

from ledger.models import Heartbeat

logger = logging.getLogger("opsconsole.health")

# Once true, true for the life of the process: migrations are not unapplied under running code.
_migrated = False


@cache
def _known_migrations() -> frozenset[tuple[str, str]]:
    """Every migration of this code, read from disk once (loading the graph takes tens of ms)."""
    return frozenset(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)


def migrations_applied() -> bool:
    global _migrated
    if not _migrated:
        applied = set(MigrationRecorder.Migration.objects.values_list("app", "name"))
        _migrated = _known_migrations() <= applied
    return _migrated


def sweep_is_fresh() -> bool:
    stale_after = settings.OPSCONSOLE_SWEEP_STALE_SECONDS
    if not stale_after:
        return True
    beat_at = Heartbeat.objects.filter(name="sweep").values_list("beat_at", flat=True).first()
    return beat_at is not None and beat_at >= timezone.now() - timedelta(seconds=stale_after)


def unready_because() -> str:
    """Why this process is not ready ("" when it is)."""
    try:
        if not migrations_applied():
            return "migrations are not all applied"
        if not sweep_is_fresh():
            return "the sweep heartbeat is missing or stale: is a qcluster running?"
    except DatabaseError as error:
        return f"the database cannot be reached ({type(error).__name__})"
    return ""


def _word(ok: bool) -> HttpResponse:
    response = HttpResponse(
        "ok\n" if ok else "unavailable\n", status=200 if ok else 503, content_type="text/plain; charset=utf-8"
    )
    response["Cache-Control"] = "no-store"
    # Not ready is logged once, as a WARNING with its reason (above): django.request would add an
    # ERROR for every probe while a deployment starts.
    response._has_been_logged = True
    return response


def healthz(request) -> HttpResponse:
    return _word(True)


def readyz(request) -> HttpResponse:
    reason = unready_because()
    if reason:
        logger.warning("not ready: %s", reason, extra={"probe": "readyz"})
    return _word(not reason)


PROBES = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = PROBES.get(request.path_info)
        if probe is None or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        return probe(request)
