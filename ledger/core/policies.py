"""The policy an action has in a workspace: its retention windows and ordering.

A ``Policy`` row of the workspace wins, field by field, over the row for every workspace, which
wins over the action's definition (``ActionDefinition.payload_retention`` ...). Intake reads the
policy of every event, so the rows are cached per process: a change made here is seen at once in
this process and within ``CACHE_SECONDS`` in every other one (the workers, the other web servers).
"""

import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction

from ledger.actions import get_action
from ledger.core import audit_chain
from ledger.models import AuditEvent, Ordering, Policy, Workspace

CACHE_SECONDS = 5.0
LONGEST = timedelta(days=36500)
FIELDS = ("payload_retention", "key_retention", "ordering", "gap_wait")
# A value of set_policy (and of the command's options) that clears a field: it is inherited again.
INHERIT = "inherit"


class PolicyError(ValueError):
    """A policy that cannot be: the message says why."""


@dataclass(frozen=True)
class EffectivePolicy:
    action: str
    payload_retention: timedelta
    key_retention: timedelta
    ordering: str
    gap_wait: timedelta
    # Where each value came from: "workspace", "every workspace" or "definition".
    sources: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict:
        # Each field read, not ``asdict``'s deep copy of every value (they are immutable; every
        # claim's configuration describes its policy).
        return {"action": self.action, **{name: getattr(self, name) for name in FIELDS}}


_cache: dict = {"at": float("-inf"), "rows": {}}


def clear_cache() -> None:
    _cache["at"] = float("-inf")


def _rows() -> dict[tuple[int | None, str], Policy]:
    if time.monotonic() - _cache["at"] > CACHE_SECONDS:
        _cache["rows"] = {(row.workspace_id, row.action): row for row in Policy.objects.all()}
        _cache["at"] = time.monotonic()
    return _cache["rows"]


def policy_for(workspace_id: int | None, action_name: str) -> EffectivePolicy:
    """The policy ``action_name`` has in the workspace (None: in a workspace without a row of its
    own); cached, see the module's note."""
    return _effective(workspace_id, action_name, _rows())


def _effective(workspace_id, action_name: str, rows) -> EffectivePolicy:
    definition = get_action(action_name)
    layers = [("workspace", rows.get((workspace_id, action_name))), ("every workspace", rows.get((None, action_name)))]
    values: dict[str, Any] = {}
    sources = []
    for name in FIELDS:
        source, values[name] = _first_set(name, layers, definition)
        sources.append((name, source))
    return EffectivePolicy(action=action_name, sources=tuple(sources), **values)


def _first_set(name: str, layers, definition) -> tuple[str, object]:
    for source, row in layers:
        value = getattr(row, name) if row is not None else None
        if value not in (None, ""):
            return source, value
    return "definition", getattr(definition, name)


def set_policy(*, workspace: Workspace | None, action: str, actor: str, **changes) -> EffectivePolicy:
    """Set fields of the action's policy in ``workspace`` (None: every workspace), audited.

    ``changes`` names fields of ``FIELDS``: a value sets it, ``INHERIT`` clears it (the value is
    then inherited), None leaves it as it is. The key window must not be shorter than the payload
    window, in any workspace the change reaches: a tombstone outlives the payload it replaced, so
    duplicates stay recognised after redaction. Nothing is written when the change is refused.
    """
    get_action(action)
    changes = {name: value for name, value in changes.items() if value is not None}
    if unknown := set(changes) - set(FIELDS):
        raise PolicyError(f"Unknown policy fields: {', '.join(sorted(unknown))}.")
    if not changes:
        raise PolicyError("Say what to change: --payload-retention, --key-retention, --ordering or --gap-wait.")
    if changes.get("ordering", INHERIT) not in (*Ordering.values, INHERIT):
        raise PolicyError(f"ordering must be one of {', '.join(Ordering.values)}.")
    try:
        with transaction.atomic():
            # Lock order (docs/architecture.md): the policy's row, then the audit chain.
            row, _ = Policy.objects.select_for_update().get_or_create(workspace=workspace, action=action)
            before = {name: getattr(row, name) for name in FIELDS}
            for name, value in changes.items():
                setattr(row, name, _stored(name, value))
            changed = [name for name in FIELDS if getattr(row, name) != before[name]]
            if changed:
                check(row)
                row.changed_by = actor
                row.save()
                said = "; ".join(f"{name} {_shown(before[name])} -> {_shown(getattr(row, name))}" for name in changed)
                where = workspace.slug if workspace else "every workspace"
                audit_chain.append(
                    [
                        AuditEvent(
                            actor=actor,
                            kind="policy_changed",
                            workspace=workspace,
                            message=f"{action} in {where}: {said}"[:500],
                        )
                    ]
                )
    finally:
        clear_cache()  # the row read above may have been created and rolled back
    return policy_for(workspace.pk if workspace else None, action)


def check(proposed: Policy) -> None:
    """Refuse ``proposed`` (a row not saved yet) if, with it, the key window would be shorter than
    the payload window in a workspace it reaches (its own, or, for every workspace, each one)."""
    clear_cache()
    rows = dict(_rows()) | {(proposed.workspace_id, proposed.action): proposed}
    reached: set[int | None] = (
        {proposed.workspace_id}
        if proposed.workspace_id
        else {workspace_id for workspace_id, action in rows if action == proposed.action}
    )
    for workspace_id in reached | {proposed.workspace_id}:
        effective = _effective(workspace_id, proposed.action, rows)
        if effective.key_retention < effective.payload_retention:
            where = Workspace.objects.get(pk=workspace_id).slug if workspace_id else "every workspace"
            raise PolicyError(
                f"in {where}, the key window ({format_duration(effective.key_retention)}) would be shorter than the "
                f"payload window ({format_duration(effective.payload_retention)}): a tombstone must outlive its "
                "payload, so that duplicates are still recognised after redaction."
            )


def _stored(name: str, value):
    if value != INHERIT:
        return value
    return "" if name == "ordering" else None


def _shown(value) -> str:
    if value in (None, ""):
        return "inherited"
    return format_duration(value) if isinstance(value, timedelta) else str(value)


_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> timedelta | str:
    """``90d``, ``12h``, ``30m`` or ``45s``: a positive whole number and a unit; or ``inherit``."""
    if text == INHERIT:
        return INHERIT
    match = _DURATION.match(text or "")
    # 10**8 of any unit is already past the longest window, and timedelta would overflow beyond it.
    value = timedelta(**{_UNITS[match.group(2)]: min(int(match.group(1)), 10**8)}) if match else None
    if value is None or not timedelta(0) < value <= LONGEST:
        raise PolicyError(
            f"{text!r} is not a duration: write a whole number and a unit, e.g. 7d, 12h, 30m or "
            "45s, more than nothing and at most 100 years (36500d)."
        )
    return value


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
