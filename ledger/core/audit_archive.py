"""Taking the oldest month of the audit trail out to a file (``manage.py archive_audit``), and
verifying such a file on its own (``manage.py verify_audit --archive FILE``).

A month's partition (``ledger.core.audit_partitions``) is archived whole, oldest first, once its
month has ended: its events are checked link by link and MAC by MAC as they are written to a file
of JSON lines, the file is synced to disk, and then, in one transaction, the archive is recorded
(``AuditArchive``) and the partition detached and dropped (no row deleted, no dead tuple). The
live chains then go on from where the archive ends: each chain's first live event follows the
archive's last event of it, which verification (``ledger.core.audit_verify``) takes from the
record.

The file's first line is its record, signed under the audit key: the format, the installation and
its keying (so the file verifies without the database), the partition and its months, how many
events, each chain's stretch (the hash it follows, its last event's id and hash) and the SHA-256 of
the lines after it; each line after it is one event, its columns as the trail holds them. The
record in the database carries the same signature, so a record made up to hide a month dropped by
hand does not verify, and neither does a file whose events were changed.
"""

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.core import audit_partitions, audit_verify
from ledger.models import AuditArchive, AuditInstallation

# Archiving waits this long for the trail's lock (a detach takes it whole, for a moment): longer,
# and it gives up, to be run again, rather than hold every append up behind it.
LOCK_TIMEOUT = "5s"
CHUNK = 5000  # events read at a time


class ArchiveRefused(Exception):
    """Why a month cannot be archived now; nothing was written."""


@dataclass
class Archived:
    partition: str
    events: int
    path: Path
    chains: dict


def archive_oldest(directory: Path, *, partition: str = "", now: datetime | None = None) -> Archived:
    """Archive the trail's oldest partition (``partition``, if named, must be it) to
    ``directory``/<partition>.jsonl, then record it and drop the partition."""
    now = now or timezone.now()
    oldest = _oldest(partition, now)
    path = Path(directory) / f"{oldest.name}.jsonl"
    if path.exists():
        raise ArchiveRefused(f"{path} exists: an archive is never overwritten (move it, or archive elsewhere)")
    if not path.parent.is_dir():
        raise ArchiveRefused(f"{path.parent} is not a directory")
    installation = AuditInstallation.objects.first()
    if installation is None:
        raise ArchiveRefused(audit_verify.INSTALLATION_MISSING)
    partial = path.with_name(path.name + ".partial")
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                # Foreign keys checked at commit (none pending in a transaction of its own; a
                # caller's may have some) would keep the partition from being dropped.
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                # Nothing is added to the month while it is read (a month that has ended takes no
                # events, but an owner's INSERT with an old time would).
                cursor.execute(f"LOCK TABLE {connection.ops.quote_name(oldest.name)} IN SHARE MODE")
            record = _write(partial, oldest, installation)
            _sync_rename(partial, path)
            AuditArchive.objects.create(
                partition=oldest.name,
                starts=oldest.starts,
                ends=oldest.ends,
                events=record["events"],
                chains=record["chains"],
                file_name=path.name,
                file_sha256=record["file_sha256"],
                key_id=record["key_id"],
                mac=record["mac"],
                archived_at=now,
            )
            with connection.cursor() as cursor:
                quoted = connection.ops.quote_name(oldest.name)
                cursor.execute(f"ALTER TABLE {audit_partitions.TABLE} DETACH PARTITION {quoted}")
                cursor.execute(f"DROP TABLE {quoted}")
    except BaseException:
        partial.unlink(missing_ok=True)
        if path.exists() and not AuditArchive.objects.filter(partition=oldest.name).exists():
            path.unlink()  # the partition is still there: the file it would have replaced goes
        raise
    return Archived(oldest.name, record["events"], path, record["chains"])


def _oldest(named: str, now: datetime) -> audit_partitions.Partition:
    parts = audit_partitions.partitions()
    if not parts:
        raise ArchiveRefused("the audit trail has no month's partition to archive")
    oldest = parts[0]
    if named and named != oldest.name:
        known = {part.name for part in parts}
        if named not in known:
            raise ArchiveRefused(f"{named} is not a partition of the audit trail (the oldest is {oldest.name})")
        raise ArchiveRefused(
            f"{oldest.name} comes before {named}: months are archived oldest first, so that every chain "
            "stays one stretch in the files and one in the table"
        )
    this_month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if oldest.ends > this_month:
        raise ArchiveRefused(f"{oldest.name} runs to {oldest.ends:%Y-%m-%d}: only a month that has ended is archived")
    return oldest


def _write(path: Path, partition: audit_partitions.Partition, installation: AuditInstallation) -> dict:
    """The partition's events, checked, to ``path`` after their signed record; the record. The
    events go to a file beside it first (the record, first in the file, is known only after them)."""
    events_path = path.with_name(path.name + ".events")
    try:
        record = _write_events(events_path, partition, installation)
        with open(events_path, encoding="utf-8") as events, open(path, "w", encoding="utf-8") as whole:
            whole.write(json.dumps(record, sort_keys=True) + "\n")
            shutil.copyfileobj(events, whole)
    finally:
        events_path.unlink(missing_ok=True)
    return record


def _write_events(path: Path, partition: audit_partitions.Partition, installation: AuditInstallation) -> dict:
    """The partition's events, checked, to ``path``; their signed record."""
    rules = audit_verify.current_rules(installation)
    try:
        before = audit_verify.archived_chains()
    except audit_verify.BrokenArchiveRecord as error:
        raise ArchiveRefused(f"{error}: nothing was archived") from error
    walks: dict[str, audit_verify.Walk] = {}
    first_prev: dict[str, str] = {}
    digest = hashlib.sha256()
    with open(path, "w", encoding="utf-8") as body:
        for row in _rows(partition.name):
            key = audit_verify.chain_key(row["workspace_id"], row["lane"])
            if key not in walks:
                # Held to the archive before this one, where the chain was archived before.
                walks[key] = audit_verify.Walk.after(before.get(key), rules)
                first_prev[key] = row["prev_hash"]
            if problem := walks[key].step(row, rules):
                raise ArchiveRefused(f"event {row['id']} {problem}: run manage.py verify_audit; nothing was archived")
            line = json.dumps(_line(row), sort_keys=True) + "\n"
            body.write(line)
            digest.update(line.encode())
    chains = {
        key: {
            "first_prev": first_prev[key],
            "last_id": walk.last_id,
            "last_hash": walk.last_hash,
            "last_key": walk.last_key,
            "events": walk.events,
        }
        for key, walk in walks.items()
    }
    events = sum(walk.events for walk in walks.values())
    record = {
        "format": audit_verify.FORMAT,
        "installation": str(installation.installation),
        "keyed_since": installation.keyed_since.isoformat(),
        "unkeyed_until": installation.unkeyed_until,
        "partition": partition.name,
        "starts": partition.starts.isoformat() if partition.starts else None,
        "ends": partition.ends.isoformat(),
        "events": events,
        "chains": chains,
        "file_sha256": digest.hexdigest(),
        "key_id": settings.OPSCONSOLE_AUDIT_KEY_ID,
    }
    record["mac"] = audit_verify.sign(record, settings.OPSCONSOLE_AUDIT_KEY)
    return record


def _rows(name: str) -> Iterator[dict]:
    """The partition's events chain by chain (a workspace's lanes in turn, the global chain first),
    each in id order, a chunk at a time: a month may hold millions."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT workspace_id, lane FROM {connection.ops.quote_name(name)}")
        chains = sorted(cursor.fetchall(), key=lambda chain: (chain[0] or 0, chain[1]))
    for workspace_id, lane in chains:
        yield from audit_verify.chain_rows(workspace_id, lane, chunk=CHUNK, table=name)


def _line(row: dict) -> dict:
    return row | {"created_at": row["created_at"].isoformat()}


def _sync_rename(partial: Path, path: Path) -> None:
    """The file on disk, under its name, before the partition goes (a crash leaves both, not neither)."""
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    os.rename(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
