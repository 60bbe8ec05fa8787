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
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection

from ledger.core import audit_mac
from ledger.core.audit_heads import HeadsCheck
from ledger.models import AuditEvent, AuditInstallation

INSTALLATION_MISSING = "the installation record (ledger_auditinstallation) is missing: it was deleted"
# One chunk of a chain in id order: plain columns, the times as the database wrote them.
_COLUMNS = ("id", *audit_mac.FIELDS, "created_at", "times_text", "hash", "hash_key")
_CHUNK = f"""
SELECT id, {", ".join(audit_mac.FIELDS)}, created_at, times::text, hash, hash_key
FROM ledger_auditevent WHERE {{chain}} AND id > %(after)s ORDER BY id LIMIT %(chunk)s
"""


@dataclass
class Chain:
    workspace_id: int | None
    events: int = 0
    unchained: int = 0  # events older than the chain (recorded before chaining began)
    head: str = ""


@dataclass
class BrokenLink:
    workspace_id: int | None
    event_id: int | None  # None: the chain as a whole (it vanished), or the installation record
    problem: str
    of_installation: bool = False


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
    known = set(AuditEvent.objects.order_by().values_list("workspace_id", flat=True).distinct())
    if heads is not None and (vanished := set(heads.last_heads) - known):
        workspace_id = min(vanished, key=lambda key: key or 0)
        report.broken = BrokenLink(workspace_id, None, f"has no events left, and the heads of {heads.last_at} name one")
        return report
    for workspace_id in sorted(known, key=lambda key: key or 0):
        chain = Chain(workspace_id)
        report.chains.append(chain)
        new = heads is not None and workspace_id not in heads.last_heads
        new_since = heads.last_at if heads is not None and new else ""
        report.broken = _verify_chain(chain, rules, new_since=new_since, chunk=chunk)
        if report.broken:
            break
    return report


def _rules() -> Rules | None:
    """The rules of this installation, from its record (which ``check_heads`` held to every signed
    line of heads, where there are any); None if the record is gone."""
    installation = AuditInstallation.objects.first()
    if installation is None:
        return None
    ranked = [*settings.OPSCONSOLE_AUDIT_OLD_KEYS, settings.OPSCONSOLE_AUDIT_KEY_ID]
    ranks = {"": -1} | {key_id: rank for rank, key_id in enumerate(ranked)}
    return Rules(installation.keyed_since, installation.unkeyed_until, audit_mac.audit_keys(), ranks)


def _rows(workspace_id: int | None, *, chunk: int) -> Iterator[dict]:
    """The chain's events as column values, in id order, read ``chunk`` at a time."""
    # Two forms, so that each reads the chain's index (workspace, id).
    sql = _CHUNK.replace("{chain}", "workspace_id IS NULL" if workspace_id is None else "workspace_id = %(chain)s")
    after = -(2**63)  # the least bigint: an id the owner chose below 1 is read too
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, {"chain": workspace_id, "after": after, "chunk": chunk})
            rows = [dict(zip(_COLUMNS, values, strict=True)) for values in cursor.fetchall()]
        if not rows:
            return
        yield from rows
        after = rows[-1]["id"]


def _verify_chain(chain: Chain, rules: Rules, *, new_since: str, chunk: int) -> BrokenLink | None:
    previous, rank = None, -1
    for row in _rows(chain.workspace_id, chunk=chunk):
        chain.events += 1
        if new_since and chain.events == 1 and not row["hash_key"]:
            return BrokenLink(
                chain.workspace_id,
                row["id"],
                f"begins a chain that appeared since the heads exported {new_since} and is not keyed "
                "(made up by someone without the audit key)",
            )
        if problem := _problem(row, previous, rank, rules):
            return BrokenLink(chain.workspace_id, row["id"], problem)
        if not row["hash"]:
            chain.unchained += 1
            continue
        rank = max(rank, rules.ranks[row["hash_key"]])
        previous = chain.head = row["hash"]
    return None


def _problem(row: dict, previous, rank: int, rules: Rules) -> str:
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
