"""A transaction that lost to another one (a deadlock, a serialization failure), run again.

Every place that takes row locks and a workspace's audit chain takes them in one order
(docs/architecture.md, "One lock order"), so PostgreSQL should find no deadlock between them.
Should one still happen (a path the rule missed, a lock this code does not take), PostgreSQL
aborts one of the transactions (40P01), as it does a transaction whose snapshot went stale under
SERIALIZABLE (40001). Nothing of the aborted transaction stays, so running the whole of it again
is safe: ``retried`` does that a few times, and then lets the error go, which the web answers
``503 busy`` with Retry-After (``opsconsole.middleware``), never ``unavailable``: the database is
there, it was busy.

Only a whole transaction is run again. Inside a caller's transaction the aborted one is the
caller's, so ``retried`` runs the function once and leaves the retry to whoever owns it.
"""

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connection

logger = logging.getLogger("ledger")

T = TypeVar("T")

# SQLSTATEs of a transaction aborted because of another one: safe to run again from its start.
DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"
CONTENTION = {DEADLOCK_DETECTED: "deadlock", SERIALIZATION_FAILURE: "serialization failure"}
# Tries in all; between them a short, jittered pause, so the two do not meet again at once.
TRIES = 4
PAUSE_SECONDS = 0.02


def contention(exc: BaseException) -> str:
    """``"deadlock"`` or ``"serialization failure"`` when ``exc`` (a Django database error, or the
    driver's behind it) is one, else ``""``."""
    for error in (exc, exc.__cause__):
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        if code in CONTENTION:
            return CONTENTION[code]
    return ""


def retried(function: Callable[..., T], *args, doing: str, tries: int = TRIES, **kwargs) -> T:
    """``function(*args, **kwargs)``, which runs one whole transaction, run again (up to ``tries``
    times in all) when the database aborted it for a deadlock or a serialization failure. Outside
    any transaction only: inside one it runs once. ``doing`` names it in the log."""
    if connection.in_atomic_block:
        return function(*args, **kwargs)
    for attempt in range(1, tries + 1):
        try:
            return function(*args, **kwargs)
        except DatabaseError as exc:
            what = contention(exc)
            if not what or attempt == tries:
                if what:
                    logger.warning(
                        "database contention: %s met a %s %d times; giving up",
                        doing,
                        what,
                        attempt,
                        extra={"contention": what, "tries": attempt},
                    )
                raise
            logger.info(
                "database contention: %s met a %s; running it again",
                doing,
                what,
                extra={"contention": what, "tries": attempt},
            )
            time.sleep(random.uniform(0, PAUSE_SECONDS * attempt))  # jitter, not a secret
    raise AssertionError("unreachable")
