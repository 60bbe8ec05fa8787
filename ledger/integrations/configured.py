"""HTTP actions defined by configuration (``ledger.models.HttpAction`` rows and their
``Destination``), not code: each row becomes an action definition (``ledger.integrations.http_action``)
the registry holds beside the coded ones, so it runs through the same engine (leases, fencing,
classification, reconciliation, approvals, audit, metrics). docs/integrations.md describes the format.

The registry reads the rows again when they change (``Loaded``): each process looks at most every
``REFRESH_SECONDS`` whether any row changed (one small query), and at once after a save in its own
process. A definition holds plain values only (no rows, ``ledger.integrations.destination_config``), so a
pool thread can perform it without touching the database.
"""

import math
import threading
import time
from contextlib import nullcontext

import jsonschema
from django.db import DatabaseError, connection, transaction

from ledger.actions.base import registry
from ledger.integrations.destination_config import DestinationConfig
from ledger.integrations.http_action import ConfiguredHttpAction
from ledger.models import Destination, HttpAction

_ACTIONS, _DESTINATIONS = HttpAction._meta.db_table, Destination._meta.db_table


class Loaded:
    """The configured actions as the registry sees them, read again when a row changed."""

    REFRESH_SECONDS = 2.0

    def __init__(self):
        self.actions: dict[str, ConfiguredHttpAction] = {}
        self.stamp: tuple | None = None
        self.checked_at = -math.inf
        self.lock = threading.Lock()

    def __call__(self) -> dict[str, ConfiguredHttpAction]:
        if time.monotonic() - self.checked_at < self.REFRESH_SECONDS:
            return self.actions
        with self.lock:
            if time.monotonic() - self.checked_at >= self.REFRESH_SECONDS:
                self._refresh()
        return self.actions

    def forget(self) -> None:
        """Read the rows again at the next look (after a save in this process)."""
        self.checked_at = -math.inf

    def assume_none(self) -> None:
        """Know, without asking, that there are no configured actions (the tests' empty database)."""
        self.actions, self.stamp, self.checked_at = {}, (0, None, 0, None), time.monotonic()

    def _refresh(self) -> None:
        # Inside a transaction, a savepoint: a failure (the tables not there yet) must not spoil it.
        inside = connection.in_atomic_block
        try:
            with transaction.atomic() if inside else nullcontext():
                stamp = self._stamp()
                if stamp != self.stamp:
                    self.actions, self.stamp = self._load(), stamp
        except (DatabaseError, RuntimeError):
            # Before the tables exist (migrations), or in a call thread (which may not query): the
            # actions as last read, looked at again next time.
            return
        self.checked_at = time.monotonic()

    @staticmethod
    def _stamp() -> tuple:
        """Whether any row changed: how many there are, and the last change, in one query."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT (SELECT count(*) FROM {_ACTIONS}), (SELECT max(updated_at) FROM {_ACTIONS}),"
                f" (SELECT count(*) FROM {_DESTINATIONS}), (SELECT max(updated_at) FROM {_DESTINATIONS})"
            )
            return tuple(cursor.fetchone())

    @staticmethod
    def _load() -> dict[str, ConfiguredHttpAction]:
        loaded = {}
        for row in HttpAction.objects.select_related("destination"):
            if row.name in registry.coded:
                continue  # a coded action of the name wins (saving refuses such a row)
            try:
                loaded[row.name] = ConfiguredHttpAction(row, DestinationConfig.of(row.destination))
            except (KeyError, TypeError, ValueError, jsonschema.SchemaError):
                continue  # saving refuses a row that cannot be built; one written otherwise is skipped
        return loaded


loaded = Loaded()
registry.configured = loaded
