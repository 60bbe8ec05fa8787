"""The audit chains' heads, kept outside the database, and the database held to them.

A chain shows an event changed, inserted or removed before its head, but not its newest events cut
off: what is left still links up. So the heads (each chain's newest event: id and hash) are
exported on a schedule, as one JSON line signed with HMAC-SHA256 under the audit key, to a place
the database's owner does not control (``OPSCONSOLE_AUDIT_HEADS_TO``: ``file:///path`` appends the
line, ``http(s)://...`` POSTs it). ``check_heads`` (``verify_audit --heads FILE``) then requires
every exported head to be still on its chain: the same event, with the same hash.

A line::

    {"at": "2026-12-04T10:00:00+00:00", "heads": [{"event_id": 812, "hash": "9f..", "workspace_id": 3},
     {"event_id": 17, "hash": "c0..", "workspace_id": null}], "installation": "5f0c..", "key_id": "1",
     "keyed_since": "2026-11-20T08:00:00+00:00", "mac": "5b..", "unkeyed_until": 0}

``mac`` is the HMAC of the line without it, as JSON with sorted keys and no spaces. ``installation``,
``keyed_since`` and ``unkeyed_until`` are the database's ``AuditInstallation`` (lines exported
before migration 0045 have none): a line of another installation, or whose record differs from the
database's (a keying date moved), is refused, so verification may read the record from the database.
"""

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import connection
from django.utils import timezone

from ledger.core.audit_mac import audit_keys
from ledger.models import AuditEvent, AuditInstallation, Workspace

# A workspace's next lane after ``after`` (other than 0) that holds events: one probe of
# audit_lane_idx, whose condition is lane <> 0. Two forms, so that each reads the index.
_NEXT_LANE = "SELECT lane FROM ledger_auditevent WHERE {workspace} AND lane > %s AND lane <> 0 ORDER BY lane LIMIT 1"


def current_heads() -> list[dict]:
    """Each chain's newest hashed event (the global chain's first), a workspace's lanes in order, a
    lane past 0 named (``lane``) in its head: one index probe per chain, and one more per workspace
    for its lanes (every lane that holds events, whatever lane count the workspace has now)."""
    heads = []
    for workspace_id in [None, *Workspace.objects.order_by("pk").values_list("pk", flat=True)]:
        for lane in [0, *later_lanes(workspace_id)]:
            head = (
                AuditEvent.objects.filter(workspace=workspace_id, lane=lane)
                .exclude(hash="")
                .order_by("-id")
                .values_list("id", "hash")
                .first()
            )
            if head:
                named = {"lane": lane} if lane else {}
                heads.append({"workspace_id": workspace_id, "event_id": head[0], "hash": head[1]} | named)
    return heads


def _mac(body: dict, key: str) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()


def signed_line() -> str:
    installation = AuditInstallation.objects.get()
    body = {
        "at": timezone.now().isoformat(),
        "key_id": settings.OPSCONSOLE_AUDIT_KEY_ID,
        "installation": str(installation.installation),
        "keyed_since": installation.keyed_since.isoformat(),
        "unkeyed_until": installation.unkeyed_until,
        "heads": current_heads(),
    }
    return json.dumps(body | {"mac": _mac(body, settings.OPSCONSOLE_AUDIT_KEY)}, sort_keys=True)


def export_heads(destination: str) -> str:
    """Append (``file://``) or POST (``http://``, ``https://``) a signed line of the current heads."""
    line = signed_line()
    target = urlsplit(destination)
    if target.scheme == "file":
        # O_APPEND: lines from two exporters at once do not interleave; fsync: the line outlives a crash.
        descriptor = os.open(target.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(descriptor, (line + "\n").encode())
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    elif target.scheme in ("http", "https"):
        httpx.post(
            destination,
            content=line,
            headers={"Content-Type": "application/json"},
            timeout=settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS,
        ).raise_for_status()
    else:
        raise ValueError("OPSCONSOLE_AUDIT_HEADS_TO must be file:///path, http://... or https://...")
    return f"{len(json.loads(line)['heads'])} chain heads exported"


@dataclass
class HeadsCheck:
    lines: int = 0
    problem: str = ""
    # Of the last line: when it was exported, and its heads by chain, (workspace id, lane).
    last_at: str = ""
    last_heads: dict = field(default_factory=dict)


def check_heads(lines, archived: dict | None = None) -> HeadsCheck:
    """Hold the database to exported lines of heads: each line's signature valid under its key id
    (any configured key), each head still an event of its chain with the hash exported, or in a
    month archived since (``archived``: where each chain's archived stretch ends, by chain key,
    from records whose signatures hold: ``audit_verify.archived_chains``)."""
    archived = archived or {}
    report, keys = HeadsCheck(), audit_keys()
    slugs = dict(Workspace.objects.values_list("pk", "slug"))
    installation = AuditInstallation.objects.first()
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        report.lines += 1
        try:
            line = json.loads(text)
            mac = line.pop("mac")
            body = {name: line[name] for name in ("at", "key_id", "heads")} | line
        except (ValueError, KeyError, TypeError):
            report.problem = f"line {number} is not a line of exported heads"
            return report
        key = keys.get(body["key_id"])
        if key is None:
            report.problem = (
                f"line {number} is signed under audit key id {body['key_id']!r}, which is not "
                "configured (OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS)"
            )
            return report
        if not hmac.compare_digest(_mac(body, key), str(mac)):
            report.problem = (
                f"line {number} (exported {body['at']}): its signature does not match (the line was "
                "changed, or signed under another key with this id)"
            )
            return report
        if problem := _installation_problem(body, installation):
            report.problem = f"line {number} (exported {body['at']}): {problem}"
            return report
        for head in body["heads"]:
            workspace_id, lane = head["workspace_id"], head.get("lane", 0)
            kept = AuditEvent.objects.filter(
                pk=head["event_id"], workspace_id=workspace_id, lane=lane, hash=head["hash"]
            )
            archived_end = archived.get(chain_key(workspace_id, lane), {})
            last_id = archived_end.get("last_id") or 0
            in_archive = head["event_id"] < last_id or (
                head["event_id"] == last_id and head["hash"] == archived_end["last_hash"]
            )
            if in_archive:
                continue  # in a month archived since: verify_audit --archive holds the file to its record
            if not kept.exists():
                chain = f"workspace {slugs.get(workspace_id, workspace_id)}" if workspace_id else "the global chain"
                chain += f" lane {lane}" if lane else ""
                report.problem = (
                    f"line {number} (exported {body['at']}): the exported head of {chain}, event "
                    f"{head['event_id']}, is no longer on its chain (events were cut off or rewritten "
                    "after it was exported)"
                )
                return report
        report.last_at = body["at"]
        report.last_heads = {(head["workspace_id"], head.get("lane", 0)): head for head in body["heads"]}
    return report


def _installation_problem(body: dict, installation: AuditInstallation | None) -> str:
    """Why a signed line does not belong to this database's installation ("" when it does)."""
    if "installation" not in body:
        return ""  # exported before lines named their installation (migration 0045)
    if installation is None:
        return "the database has no installation record (ledger_auditinstallation was emptied)"
    if body["installation"] != str(installation.installation):
        return f"it is of installation {body['installation']}, and this database is {installation.installation}"
    if datetime.fromisoformat(body["keyed_since"]) != installation.keyed_since:
        return (
            f"the installation was keyed on {body['keyed_since']}, and the database now says "
            f"{installation.keyed_since.isoformat()} (its installation record was changed)"
        )
    if body.get("unkeyed_until", installation.unkeyed_until) != installation.unkeyed_until:
        return (
            f"the last event of before keys was {body['unkeyed_until']}, and the database now says "
            f"{installation.unkeyed_until} (its installation record was changed)"
        )
    return ""


def later_lanes(workspace_id: int | None) -> list[int]:
    """The lanes other than 0 of a workspace (None: the global chain's, which appends never make)
    that hold events, in order."""
    lanes: list[int] = []
    if workspace_id is None:
        sql, arguments = _NEXT_LANE.format(workspace="workspace_id IS NULL"), []
    else:
        sql, arguments = _NEXT_LANE.format(workspace="workspace_id = %s"), [workspace_id]
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, [*arguments, lanes[-1] if lanes else -(2**15) - 1])  # below every smallint
            found = cursor.fetchone()
            if found is None:
                return lanes
            lanes.append(found[0])


def chain_key(workspace_id: int | None, lane: int = 0) -> str:
    """A chain's name in archives: its workspace's id ("" for the global chain),
    then ``:`` and its lane for a lane past 0 (lane 0 keeps the name every chain had before lanes)."""
    name = "" if workspace_id is None else str(workspace_id)
    return f"{name}:{lane}" if lane else name
