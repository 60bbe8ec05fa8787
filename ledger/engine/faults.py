"""Fault points for the fault tests (tests/faults/). Inert unless a test sets the environment.

``OPSCONSOLE_CRASH_AT=<point>`` makes the process that reaches that point kill itself with
SIGKILL, as a power cut would. ``OPSCONSOLE_TERMINATE_AT=<point>`` makes it have PostgreSQL
terminate its own database connection (``pg_terminate_backend``), as a database restart or a
network cut would: the statement fails and the open transaction is lost. With
``OPSCONSOLE_CRASH_ONCE_FILE=<path>`` either fault happens only if that file does not exist yet
(and creates it first), so the restarted worker, or the next operation, carries on.
"""

import os
import signal

# Points on the internal path (prepare-brief), and the one external point: after the destination
# acted, before the outcome is recorded.
POINTS = ("after_claim", "after_commit", "mid_batch")
EXTERNAL_POINTS = ("after_external_call",)
# Inside the transaction that records an outcome, after its writes, before its commit.
TERMINATE_POINTS = ("before_outcome_commit",)
# Inside a claim's transaction that also performs and records a set (ledger.engine.claiming.finish_in_claim).
IN_CLAIM_POINTS = ("inside_claim",)


def crash_point(name: str) -> None:
    if os.environ.get("OPSCONSOLE_CRASH_AT") == name and _first_time(name):
        os.kill(os.getpid(), signal.SIGKILL)


def fault_point(name: str) -> None:
    """A point where a crash or a lost database connection can be injected."""
    crash_point(name)
    if os.environ.get("OPSCONSOLE_TERMINATE_AT") == name and _first_time(name):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def _first_time(name: str) -> bool:
    once_file = os.environ.get("OPSCONSOLE_CRASH_ONCE_FILE")
    if not once_file:
        return True
    try:
        with open(once_file, "x") as marker:
            marker.write(f"{name} {os.getpid()}\n")
    except FileExistsError:
        return False
    return True
