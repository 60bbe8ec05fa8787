"""Reading lists from a streaming replica (``DATABASE_REPLICA_URL``), by name, where a page only shows
rows.

Nothing reads the replica unless it asks for it: the read services of the console's lists, the
dashboard and the CSV exports put ``.using(for_lists())`` on the rows they list. Everything else,
and above all every read that decides a write (a claim, a decision, a form's validation, the
permission check before an action, anything in a POST), runs on the primary ("default"), where a
change made a moment ago is already visible.

Who may see what is read on the primary too: ``ledger.core.roles`` reads a person's memberships
from it and narrows the replica's rows to a literal list of workspace ids, so a membership removed
a moment ago grants nothing even while the replica still holds it.

Each time a list is about to read the replica it is asked how far behind it is (one short
statement, which also finds a connection that broke since the last page). Out of reach, it is not
asked again for ``RETRY_SECONDS``, and the lists read the primary meanwhile: a replica that is down
costs a log line, not a failed page (unless it goes away between that question and the list's
own query, a few milliseconds later: that page answers 503, as for a primary out of reach).
"""

import contextlib
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connections

REPLICA = "replica"
DEFAULT = "default"
CHECK_SECONDS = 1.0  # how long one answer about the replica's lag is trusted for the page's notice
RETRY_SECONDS = 10.0  # how long a replica out of reach is left alone

# Zero while the replica has replayed all it received (nothing written since, or caught up), else
# the age of the last transaction it replayed. NULL on a server that is not replaying (not a replica).
LAG_SQL = (
    "SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
    "ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END"
)

logger = logging.getLogger("ledger")


@dataclass(frozen=True)
class _Checked:
    at: float  # time.monotonic() of the answer
    reachable: bool
    lag_seconds: float


_last: _Checked | None = None


class Router:
    """The replica is never written and never migrated; reads go where the code says (``using``),
    the primary when it says nothing. Rows of either database may relate: they are the same data."""

    def db_for_read(self, model, **hints):
        return None

    def db_for_write(self, model, **hints):
        # Even a row read from the replica is saved on the primary.
        return DEFAULT

    def allow_relation(self, obj1, obj2, **hints):
        return True

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return False if db == REPLICA else None


def configured() -> bool:
    return REPLICA in settings.DATABASES


def for_lists() -> str:
    """The database a page that only lists rows reads them from: "replica" when one is configured
    and answers, else "default"."""
    if not configured():
        return DEFAULT
    # Asked each time (unless it was out of reach a moment ago): a replica that went away since
    # the last page is noticed here, where falling back is still possible, not in the list's query.
    return REPLICA if _checked(fresh=True).reachable else DEFAULT


def lag_notice(database: str) -> str:
    """What a page that read its rows from ``database`` says about it: "" unless that was the
    replica and it lags more than OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS."""
    if database != REPLICA:
        return ""
    return lag_text(_checked().lag_seconds, settings.OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS)


def lag_text(lag_seconds: float, warning_seconds: float) -> str:
    if lag_seconds <= warning_seconds:
        return ""
    return f"These lists read from a replica that is {round(lag_seconds)} s behind: the newest changes may be missing."


def _checked(*, fresh: bool = False) -> _Checked:
    """The replica's last answer while it still holds (``fresh``: a reachable one is asked again),
    else a new one."""
    global _last
    now = time.monotonic()
    if _last is not None and now - _last.at < _trusted_for(_last, fresh=fresh):
        return _last
    _last = _Checked(now, *_ask())
    return _last


def _trusted_for(last: _Checked, *, fresh: bool) -> float:
    if not last.reachable:
        return RETRY_SECONDS  # out of reach: left alone a while
    return 0.0 if fresh else CHECK_SECONDS


def _ask() -> tuple[bool, float]:
    """Whether the replica answers, and its lag in seconds."""
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(LAG_SQL)
            (lag,) = cursor.fetchone()
    except DatabaseError as error:
        # A broken connection is not kept: the next question reconnects.
        with contextlib.suppress(DatabaseError):
            connections[REPLICA].close()
        logger.warning(
            "the read replica is out of reach, lists read the primary for %d s: %s",
            RETRY_SECONDS,
            type(error).__name__,
        )
        return False, 0.0
    return True, float(lag or 0)
