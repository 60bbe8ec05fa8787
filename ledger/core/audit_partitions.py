"""Monthly range partitions of the audit trail: a stand-in until the partitioned table lands.

``ensure_range(start, end)`` will create the partitions ``ledger_auditevent_pYYYYMM`` covering
[start, end) and a DEFAULT partition; here it creates nothing (the table is not partitioned yet),
so that bench/scale.py can call it already.
"""

from datetime import datetime


def ensure_range(start: datetime, end: datetime) -> list[str]:
    """The names of the partitions created for [start, end): none in this stand-in."""
    return []
