"""Making partitions ahead, for the audit trail's months (``ledger.core.audit_partitions``) and the
deliveries' and attempts' ranges of operations (``ledger.core.operation_partitions``): each has SQL
functions that make what is missing and answer ``{"created": [..], "held_back": [..]}``, held back
being a partition whose rows its table's default partition already holds."""

import json
import logging
from dataclasses import dataclass

from django.db import connection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Created:
    created: list[str]
    held_back: list[str]  # partitions not made: the default partition holds rows of theirs (see the SQL)


def make(sql: str, arguments: list, *, of: str) -> Created:
    """Run ``sql`` (one of those functions) and log what it made and held back, as partitions ``of``."""
    with connection.cursor() as cursor:
        cursor.execute(sql, arguments)
        answer = json.loads(cursor.fetchone()[0])
    made = Created(answer["created"], answer["held_back"])
    if made.created:
        log.info("%s partitions created: %s", of, ", ".join(made.created))
    if made.held_back:
        log.warning(
            "%s partitions not created, their rows are in the default partition: %s", of, ", ".join(made.held_back)
        )
    return made
