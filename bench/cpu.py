"""CPU time spent by a server's processes and by their PostgreSQL backends, read from ``/proc``.

Wall time on a shared 2-core machine says how long something took, not what it cost: CPU time
does. ``CpuMeter.snapshot()`` before and after a measurement, and ``CpuMeter.since(before)`` gives
the seconds of CPU (user + system) that were spent in between:

- **Python**: every process of the server's process groups (gunicorn's master and workers, a
  qcluster's sentinel, pusher, monitor and workers, a pgqueuer worker). Each process's own
  ``utime + stime`` and its reaped children's ``cutime + cstime`` (``/proc/<pid>/stat``), so a
  worker recycled during the measurement is counted too: while it lives its time is its own, once
  its parent has reaped it, its parent's.
- **PostgreSQL**: the backends serving that server, found by their ``application_name`` in
  ``pg_stat_activity`` (the server is started with ``PGAPPNAME``, or asyncpg's ``server_settings``),
  each backend's ``utime + stime``. A backend that appears during the measurement counts whole (its
  connection's start is part of the cost); one that ends during it takes its time with it (its
  parent is the postmaster, whose children's time is every client's), so those are counted and
  reported as ``backends_lost``.

The machine's PostgreSQL must run on this host, in this PID namespace, and ``/proc/<pid>/stat`` of
its backends must be readable (root, or the same user).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Fields of /proc/<pid>/stat after "pid (comm)": state is field 3, so field n sits at n - 3.
_PGRP, _UTIME, _STIME, _CUTIME, _CSTIME = 5 - 3, 14 - 3, 15 - 3, 16 - 3, 17 - 3


def _stat(pid: int | str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    return text.rsplit(")", 1)[1].split()  # comm may hold spaces and parentheses


def process_seconds(pid: int, *, children: bool = True) -> float | None:
    """CPU seconds of one process (and of its reaped children), or None once it is gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    ticks = int(fields[_UTIME]) + int(fields[_STIME])
    if children:
        ticks += int(fields[_CUTIME]) + int(fields[_CSTIME])
    return ticks / CLOCK_TICKS


def group_seconds(groups: set[int]) -> float:
    """CPU seconds of every process whose process group is one of ``groups`` (zombies included:
    their time is final until their parent reaps them and takes it over)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields is None or int(fields[_PGRP]) not in groups:
            continue
        total += (int(fields[_UTIME]) + int(fields[_STIME]) + int(fields[_CUTIME]) + int(fields[_CSTIME])) / CLOCK_TICKS
    return total


@dataclass(frozen=True)
class Snapshot:
    python: float
    backends: dict[int, float]


@dataclass(frozen=True)
class CpuUse:
    python: float  # seconds
    postgres: float  # seconds
    backends: int  # backends seen at the end
    backends_lost: int  # backends that ended during the measurement (their time not counted)


class CpuMeter:
    """Reads the CPU of ``groups`` (process group ids) and of the backends named ``application_name``.

    ``observer`` is a psycopg connection in autocommit to the same database (each query sees
    ``pg_stat_activity`` afresh)."""

    def __init__(self, observer, *, groups: set[int], application_name: str):
        self.observer = observer
        self.groups = set(groups)
        self.application_name = application_name

    def backend_pids(self) -> list[int]:
        return [
            pid
            for (pid,) in self.observer.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
                [self.application_name],
            ).fetchall()
        ]

    def snapshot(self) -> Snapshot:
        backends = {}
        for pid in self.backend_pids():
            seconds = process_seconds(pid, children=False)
            if seconds is not None:
                backends[pid] = seconds
        return Snapshot(python=group_seconds(self.groups), backends=backends)

    def since(self, before: Snapshot) -> CpuUse:
        after = self.snapshot()
        postgres = sum(seconds - before.backends.get(pid, 0.0) for pid, seconds in after.backends.items())
        return CpuUse(
            python=after.python - before.python,
            postgres=postgres,
            backends=len(after.backends),
            backends_lost=len(set(before.backends) - set(after.backends)),
        )
