"""Checking that the audit trail was not rewritten (``manage.py verify_audit``), trusting nothing
the database's owner can change.

Every MAC is recomputed here, in this process, from the rows' plain column values
(``ledger.core.audit_mac``): no key is sent in SQL and no function of the schema is called. A chain
shows an event changed, inserted or removed before its head; what it cannot show by itself is
its newest events cut off, a whole chain deleted, or a chain made up by someone without the key in
the form the trail had before keys. So verification is held, by default, to the last exported heads
(``ledger.core.audit_heads``, signed under the key, kept where the owner cannot reach):

- every exported head is still on its chain (a chain that vanished or lost its tail is broken);
- an event hashed without a key (or not hashed) after the installation's keying date, or with an id
  above the last event of before keys (``AuditInstallation``, held to the signed heads), is
  broken: keys were on by then, so someone without the key wrote it;
- within a chain, an event under a key retired before one that events before it used is broken
  (keys rank in the order they were in use: ``OPSCONSOLE_AUDIT_OLD_KEYS`` as listed, then the
  current one), so a leaked retired key cannot add events after the rotation;
- a chain that appeared since the last heads must begin with a keyed event (a workspace's chain
  begins with ``workspace_created``): an unkeyed chain made up since, backdated, is broken.

A chain is a workspace's lane (``ledger.core.audit_chain``): each lane is walked on its own, whatever
lane count the workspace has now (a lane it no longer uses is still a chain, with its heads).
"""

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection

from ledger.core import audit_mac
from ledger.core.audit_heads import HeadsCheck, chain_key, later_lanes
from ledger.core.audit_mac import audit_keys
from ledger.models import AuditArchive, AuditEvent, AuditInstallation, Workspace

INSTALLATION_MISSING = "the installation record (ledger_auditinstallation) is missing: it was deleted"
# An event as verification reads it: plain columns, the times as the database wrote them (also
# the lines of an archive, ledger.core.audit_archive).
COLUMNS = ("id", *audit_mac.FIELDS, "created_at", "times_text", "lane", "hash", "hash_key")
SELECTED = ("id", *audit_mac.FIELDS, "created_at", "times::text", "lane", "hash", "hash_key")
# One chunk of a chain in id order, of the trail or of one of its partitions.
_CHUNK = f"""
SELECT {", ".join(SELECTED)}
FROM {{table}} WHERE {{chain}} AND id > %(after)s ORDER BY id LIMIT %(chunk)s
"""
# A chain's workspace (two forms, so that each reads an index) and lane: lane 0 along the
# workspace's events (audit_chain_idx), a later lane by its own (audit_lane_idx, whose condition
# is lane <> 0).
_WORKSPACE = {True: "workspace_id IS NULL", False: "workspace_id = %(chain)s"}
_LANE = {True: "lane = 0", False: "lane = %(lane)s AND lane <> 0"}


@dataclass
class Chain:
    workspace_id: int | None
    lane: int = 0
    events: int = 0
    unchained: int = 0  # events older than the chain (recorded before chaining began)
    head: str = ""


@dataclass
class BrokenLink:
    workspace_id: int | None
    event_id: int | None  # None: the chain as a whole (it vanished), or the installation record
    problem: str
    of_installation: bool = False
    lane: int = 0


@dataclass
class Rules:
    """What every event is held to beyond its own chain: the installation's keying date and the
    last event of before keys (from the signed heads where there are any), the keys by rank."""

    keyed_since: datetime
    unkeyed_until: int
    keys: dict[str, str]
    ranks: dict[str, int]


@dataclass
class Verification:
    chains: list[Chain] = field(default_factory=list)
    broken: BrokenLink | None = None


def verify_chains(heads: HeadsCheck | None = None, *, chunk: int = 2000) -> Verification:
    """Walk every chain in id order, recomputing each MAC; stops at the first broken link. With
    ``heads`` (the exported lines, already checked), also the chains the last line names and no
    event holds, and the chains that appeared since it."""
    report = Verification()
    rules = _rules()
    if rules is None:
        report.broken = BrokenLink(None, None, INSTALLATION_MISSING, of_installation=True)
        return report
    try:
        archived = archived_chains()
    except BrokenArchiveRecord as error:
        report.broken = BrokenLink(None, None, str(error), of_installation=True)
        return report
    known = live_chains()
    if heads is not None and (vanished := set(heads.last_heads) - known - _archived_heads(heads, archived)):
        workspace_id, lane = min(vanished, key=chain_order)
        report.broken = BrokenLink(
            workspace_id, None, f"has no events left, and the heads of {heads.last_at} name one", lane=lane
        )
        return report
    for workspace_id, lane in sorted(known, key=chain_order):
        chain = Chain(workspace_id, lane)
        report.chains.append(chain)
        start = archived.get(chain_key(workspace_id, lane))
        new = heads is not None and (workspace_id, lane) not in heads.last_heads and start is None
        new_since = heads.last_at if heads is not None and new else ""
        report.broken = _verify_chain(chain, rules, new_since=new_since, chunk=chunk, start=start)
        if report.broken:
            break
    return report


def live_chains() -> set[tuple[int | None, int]]:
    """Every chain with events in the table, as (workspace id, lane): each workspace's lane 0 where
    it has events there, and its other lanes (any there are, the global chain's and a made-up
    negative one too) found one index probe each."""
    chains = {
        (workspace_id, 0)
        for workspace_id in AuditEvent.objects.filter(lane=0)
        .order_by()
        .values_list("workspace_id", flat=True)
        .distinct()
    }
    workspaces = {None, *(workspace_id for workspace_id, _ in chains), *Workspace.objects.values_list("pk", flat=True)}
    for workspace_id in workspaces:
        chains |= {(workspace_id, lane) for lane in later_lanes(workspace_id)}
    return chains


def chain_order(chain: tuple[int | None, int]) -> tuple[int, int]:
    """Chains in the order they are walked and locked: by workspace (the global chain first), then lane."""
    workspace_id, lane = chain
    return (workspace_id or 0, lane)


def _rules() -> Rules | None:
    """The rules of this installation, from its record (which ``check_heads`` held to every signed
    line of heads, where there are any); None if the record is gone."""
    installation = AuditInstallation.objects.first()
    return None if installation is None else current_rules(installation)


def current_rules(installation: AuditInstallation) -> Rules:
    return Rules(installation.keyed_since, installation.unkeyed_until, audit_mac.audit_keys(), key_ranks())


def key_ranks() -> dict[str, int]:
    """Each configured key's rank, in the order they were in use ("" below them all)."""
    ranked = [*settings.OPSCONSOLE_AUDIT_OLD_KEYS, settings.OPSCONSOLE_AUDIT_KEY_ID]
    return {"": -1} | {key_id: rank for rank, key_id in enumerate(ranked)}


def chain_rows(workspace_id: int | None, lane: int, *, chunk: int, table: str = "ledger_auditevent") -> Iterator[dict]:
    """The chain's events as column values, in id order, read ``chunk`` at a time (a statement
    each, so a pooler in transaction mode, which keeps no cursor, is no matter): of the trail, or of
    the partition ``table``."""
    sql = _CHUNK.replace("{chain}", f"{_WORKSPACE[workspace_id is None]} AND {_LANE[lane == 0]}")
    sql = sql.replace("{table}", connection.ops.quote_name(table))
    after = -(2**63)  # the least bigint: an id the owner chose below 1 is read too
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, {"chain": workspace_id, "lane": lane, "after": after, "chunk": chunk})
            rows = [dict(zip(COLUMNS, values, strict=True)) for values in cursor.fetchall()]
        if not rows:
            return
        yield from rows
        after = rows[-1]["id"]


def _archived_heads(heads: HeadsCheck, archived: dict) -> set:
    """The chains whose exported head is in an archive (the chain may have no live events)."""
    return {
        chain
        for chain, head in heads.last_heads.items()
        if head["event_id"] <= (archived.get(chain_key(*chain), {}).get("last_id") or 0)
    }


@dataclass
class Walk:
    """One chain walked event by event, each held to the one before it (``problem_of``): the hash
    the next event must follow (None at the chain's beginning), the newest key rank met so far.
    The live trail, an archive as it is written and an archive's file are walked the same way."""

    last_hash: str | None = None
    last_key: str = ""
    rank: int = -1
    last_id: int | None = None
    events: int = 0

    @classmethod
    def after(cls, end: dict | None, rules: Rules) -> "Walk":
        """A walk from where an archived stretch ``end``ed (a record's chain), or from the beginning."""
        if end is None:
            return cls()
        return cls(end["last_hash"], end["last_key"], rules.ranks.get(end["last_key"], -1))

    def step(self, row: dict, rules: Rules) -> str:
        """Why ``row`` breaks the chain here ("" when it holds: the walk then moves past it)."""
        if problem := problem_of(row, self.last_hash, self.rank, rules):
            return problem
        if row["hash"]:
            self.rank = max(self.rank, rules.ranks[row["hash_key"]])
            self.last_hash, self.last_key = row["hash"], row["hash_key"]
        self.last_id = row["id"]
        self.events += 1
        return ""


def _verify_chain(chain: Chain, rules: Rules, *, new_since: str, chunk: int, start: dict | None) -> BrokenLink | None:
    """Walk one chain from its beginning, or from where its archived stretch ends (``start``)."""
    walk = Walk.after(start, rules)
    for row in chain_rows(chain.workspace_id, chain.lane, chunk=chunk):
        chain.events += 1
        if new_since and chain.events == 1 and not row["hash_key"]:
            return BrokenLink(
                chain.workspace_id,
                row["id"],
                f"begins a chain that appeared since the heads exported {new_since} and is not keyed "
                "(made up by someone without the audit key)",
                lane=chain.lane,
            )
        if problem := walk.step(row, rules):
            return BrokenLink(chain.workspace_id, row["id"], problem, lane=chain.lane)
        if row["hash"]:
            chain.head = row["hash"]
        else:
            chain.unchained += 1
    return None


def problem_of(row: dict, previous, rank: int, rules: Rules) -> str:
    """Why this event breaks its chain ("" when it holds)."""
    if not row["hash"]:
        return "has no hash, after chained events" if previous is not None else _after_keys(row, rules)
    if row["prev_hash"] != (previous or ""):
        return "does not follow the event before it (an event was removed or inserted)"
    if not row["hash_key"]:
        if rank >= 0:
            return "is hashed without a key after keyed events (rewritten by someone without the audit key)"
        if row["created_at"] >= rules.keyed_since:
            return (
                f"is hashed without a key, and this installation was keyed on {rules.keyed_since:%Y-%m-%d %H:%M:%S} "
                "(written by someone without the audit key)"
            )
        if problem := _after_keys(row, rules):
            return problem
        return "" if audit_mac.digest(row, None) == row["hash"] else "was changed after it was written"
    if row["hash_key"] not in rules.keys:
        return (
            f"is hashed under audit key id {row['hash_key']!r}, "
            "which is not configured (OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS)"
        )
    if rules.ranks[row["hash_key"]] < rank:
        return (
            f"is under audit key id {row['hash_key']!r}, retired before a key that events before it used "
            "(written with a retired key after the rotation)"
        )
    if audit_mac.digest(row, rules.keys[row["hash_key"]]) != row["hash"]:
        return "was changed after it was written"
    return ""


def _after_keys(row: dict, rules: Rules) -> str:
    """Why an event without a MAC under a key cannot be of before keys: its id ("" when it can).
    Its time is the writer's to set; the ids handed out before keys are the installation's record."""
    if row["id"] <= rules.unkeyed_until:
        return ""
    return (
        f"has no MAC under an audit key, and every event after event {rules.unkeyed_until} was written with "
        "one (written by someone without the audit key)"
    )


# Archived months (ledger.core.audit_archive): their records' signatures, and their files verified.

FORMAT = "opsconsole-audit-archive/1"
# The fields the signature covers, in the record line, the database's record and nowhere else.
SIGNED = (
    "format",
    "installation",
    "keyed_since",
    "unkeyed_until",
    "partition",
    "starts",
    "ends",
    "events",
    "chains",
    "file_sha256",
    "key_id",
)


def sign(record: dict, key: str) -> str:
    body = {name: record[name] for name in SIGNED}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()


def record_of(archive: AuditArchive, installation: AuditInstallation | None) -> dict:
    """A database record as the signed fields of its file's record (the installation's from the
    database's own record)."""
    return {
        "format": FORMAT,
        "installation": str(installation.installation) if installation else "",
        "keyed_since": installation.keyed_since.isoformat() if installation else "",
        "unkeyed_until": installation.unkeyed_until if installation else 0,
        "partition": archive.partition,
        "starts": archive.starts.isoformat() if archive.starts else None,
        "ends": archive.ends.isoformat(),
        "events": archive.events,
        "chains": archive.chains,
        "file_sha256": archive.file_sha256,
        "key_id": archive.key_id,
        "mac": archive.mac,
    }


def signature_problem(record: dict) -> str:
    """Why a record's signature does not hold ("" when it does)."""
    key = audit_keys().get(str(record.get("key_id")))
    if key is None:
        return (
            f"is signed under audit key id {record.get('key_id')!r}, which is not configured "
            "(OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS)"
        )
    if not hmac.compare_digest(sign(record, key), str(record.get("mac", ""))):
        return "has a signature that does not match (the record was changed, or made up without the audit key)"
    return ""


class BrokenArchiveRecord(Exception):
    """A record of an archived month whose signature does not hold."""


def archived_chains() -> dict[str, dict]:
    """Where each chain's archived stretch ends, from the newest archive that holds it: {chain key:
    {"last_id", "last_hash", "last_key", ...}}. BrokenArchiveRecord when a record does not verify."""
    ends: dict[str, dict] = {}
    installation = AuditInstallation.objects.first()
    for archive in AuditArchive.objects.order_by("ends"):
        if problem := signature_problem(record_of(archive, installation)):
            raise BrokenArchiveRecord(f"the archive record of {archive.partition} {problem}")
        for key, chain in archive.chains.items():
            ends[key] = chain
    return ends


@dataclass
class FileCheck:
    path: str
    partition: str = ""
    events: int = 0
    chains: dict = field(default_factory=dict)
    problem: str = ""


def verify_files(paths: Iterable[str]) -> list[FileCheck]:
    """Verify archive files on their own, in the order given (oldest first): each record's
    signature, the lines against its digest, every event's MAC and link, and each chain going on
    from where the file before it left it. Stops at the first problem."""
    checks: list[FileCheck] = []
    ends: dict[str, Walk] = {}
    for path in paths:
        check = _verify_file(path, ends)
        checks.append(check)
        if check.problem:
            break
    return checks


def _verify_file(path: str, ends: dict) -> FileCheck:
    check = FileCheck(path)
    try:
        with open(path, encoding="utf-8") as lines:
            record = json.loads(next(lines, "null") or "null")
            if not isinstance(record, dict) or record.get("format") != FORMAT:
                check.problem = f"is not an audit archive ({FORMAT})"
                return check
            check.partition = record["partition"]
            if problem := signature_problem(record):
                check.problem = f"its record {problem}"
                return check
            rules = Rules(
                datetime.fromisoformat(record["keyed_since"]),
                record["unkeyed_until"],
                audit_keys(),
                key_ranks(),
            )
            check.problem = _verify_lines(lines, record, rules, ends, check)
    except (OSError, ValueError, KeyError, TypeError) as error:
        check.problem = f"cannot be read as an audit archive: {error}"
    return check


def _verify_lines(lines, record: dict, rules, ends: dict, check: FileCheck) -> str:
    digest = hashlib.sha256()
    walks: dict[str, Walk] = {}
    for line in lines:
        digest.update(line.encode())
        row = json.loads(line)
        row["created_at"] = datetime.fromisoformat(row["created_at"])
        key = chain_key(row["workspace_id"], row.get("lane") or 0)
        if key not in walks:
            earlier = ends.get(key)
            if earlier is not None and row["prev_hash"] != earlier.last_hash:
                return (
                    f"event {row['id']} does not follow the last event of its chain in the archive before "
                    "it (an archive is missing between them, or the files are out of order)"
                )
            # A file on its own cannot show what its first event of a chain follows: it is taken as
            # given, and held to the file before it where one was given.
            walks[key] = Walk(last_hash=row["prev_hash"] or None)
        if problem := walks[key].step(row, rules):
            return f"event {row['id']} {problem}"
        check.events += 1
    if digest.hexdigest() != record["file_sha256"]:
        return "has lines that differ from its record's digest (events were changed, added or removed)"
    if check.events != record["events"]:
        return f"holds {check.events} events, and its record says {record['events']}"
    for key, walk in walks.items():
        if walk.last_hash != record["chains"].get(key, {}).get("last_hash"):
            return f"ends its chain {key or 'global'} elsewhere than its record says"
        ends[key] = walk
    check.chains = record["chains"]
    return ""
