"""Deliveries and attempts by range of operations (migration 0068): which ranges there are, making
the next ones, and dropping one whose operations retention deletes.

``ledger_delivery`` and ``ledger_attempt`` are range-partitioned by ``operation_id``, in ranges of
operation ids (``<table>_ops_<first id>``, 1,000,000 ids wide), with ``<table>_history`` holding
the rows of the operations made before partitioning and a default partition for a refused delivery
(no operation) or an operation no range has yet. The sweep makes the next ranges ahead
(``create_ahead``); ``ledger.retention`` drops a range's partitions (``drop_range``) when every
operation in it is past its key window, instead of deleting their rows.
"""

import json
import logging
import re
from dataclasses import dataclass

from django.db import connection

from ledger.core.partitions import Created, make

log = logging.getLogger(__name__)

TABLES = ("ledger_delivery", "ledger_attempt")
OF = "operation range"

_RANGES = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'ledger_attempt'::regclass
"""
_BOUNDS = re.compile(r"FROM \('(\d+)'\) TO \('(\d+)'\)")


@dataclass(frozen=True, order=True)
class Range:
    """Operation ids from ``first`` up to (not including) ``end``."""

    first: int
    end: int

    @property
    def partitions(self) -> list[str]:
        """Its partitions, one of each table."""
        return [f"{table}_ops_{self.first}" for table in TABLES]


def ranges() -> list[Range]:
    """The ranges of operations with partitions of their own, lowest first (not the history, not
    the default partition)."""
    with connection.cursor() as cursor:
        cursor.execute(_RANGES)
        found = [_BOUNDS.search(bound) for _name, bound in cursor.fetchall()]
    return sorted(Range(int(match[1]), int(match[2])) for match in found if match)


def create_ahead() -> Created:
    """The next ranges, where missing, up to two past the newest operation (the sweep, as any role)."""
    return make("SELECT ledger_operation_partitions_ahead()", [], of=OF)


def ensure(*, width: int, upto: int) -> Created:
    """Ranges of ``width`` ids from the top of the highest one up to the one holding ``upto`` (as
    the owner: the bench's load, a test's narrow ranges)."""
    return make("SELECT ledger_operation_partitions(%s, %s)", [width, upto], of=OF)


def drop_range(first: int) -> list[str]:
    """Drop the deliveries' and attempts' partitions of the range that begins at ``first``; refused
    by the database (``DatabaseError``) unless every operation of it has been made and has finished
    and no conflict names one of its deliveries. Returns the partitions dropped."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_drop_operation_range(%s)", [first])
        dropped = json.loads(cursor.fetchone()[0])
    log.info("partitions of operations %s onwards dropped: %s", first, ", ".join(dropped))
    return dropped
