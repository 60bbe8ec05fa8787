"""Configuration versions: everything that changes what an action does, stored once per distinct
content and named by each attempt (``Attempt.config_version``).

The content is the action's ``configuration()`` (its definition, destination URL, timeouts,
settle time, sensitive fields, concurrency) and the workspace's policy for it. A replay compares
the configuration of the operation's last attempt with today's, field by field
(``changes_since_last_run``), and asks the person to confirm when they differ.
"""

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from ledger.actions import ActionDefinition, registry
from ledger.core import policies
from ledger.keys import canonical_json
from ledger.models import Attempt, ConfigVersion, Operation


@dataclass(frozen=True)
class Change:
    field: str
    before: object
    after: object

    def __str__(self) -> str:
        return f"{self.field}: {_shown(self.before)} -> {_shown(self.after)}"


def content(workspace_id: int, action: ActionDefinition) -> dict:
    policy = policies.policy_for(workspace_id, action.name).describe()
    return {
        **action.configuration(),
        "policy": {name: _plain(value) for name, value in policy.items() if name != "action"},
    }


def digests_for(operations: list[Operation]) -> list[str | None]:
    """The configuration each of ``operations`` runs under now (None: its action is gone), stored
    in the caller's transaction if it is not yet: one ``INSERT .. ON CONFLICT DO NOTHING`` for the
    lot, which finds the row that is there without writing anything (no dead row), and commits or
    rolls back with the attempts that name it."""
    digests: dict[tuple[int, str], str | None] = {}
    rows: dict[str, ConfigVersion] = {}
    for operation in operations:
        scope = (operation.workspace_id, operation.action)
        if scope in digests:
            continue
        action = registry.get(operation.action)
        if action is None:
            digests[scope] = None
            continue
        configuration = content(operation.workspace_id, action)
        digests[scope] = digest = _digest(configuration)
        rows[digest] = ConfigVersion(digest=digest, action=action.name, content=configuration)
    if rows:
        ConfigVersion.objects.bulk_create(rows.values(), ignore_conflicts=True)
    return [digests[(operation.workspace_id, operation.action)] for operation in operations]


def version_for(workspace_id: int, action: ActionDefinition) -> ConfigVersion:
    """The configuration ``action`` runs under now in the workspace, as an unsaved row (SQL that
    opens an Attempt stores it as ``digests_for`` does: ``ledger_claim``)."""
    configuration = content(workspace_id, action)
    return ConfigVersion(digest=_digest(configuration), action=action.name, content=configuration)


def _digest(configuration: dict) -> str:
    # Remembered by the configuration's plain JSON: equal text is equal content, so the same digest,
    # and C's encoder writes it in a third of the time the canonical form takes (every claim asks).
    return _digest_of(json.dumps(configuration, sort_keys=True, ensure_ascii=False))


@lru_cache(maxsize=256)
def _digest_of(plain: str) -> str:
    return hashlib.sha256(canonical_json(json.loads(plain)).encode()).hexdigest()


def current_digest(operation: Operation) -> str:
    """The digest of the configuration ``operation`` would run under now, computed, not stored
    (for log lines); "" when its action is gone."""
    action = registry.get(operation.action)
    return _digest(content(operation.workspace_id, action)) if action is not None else ""


def digest_for(operation: Operation) -> str | None:
    [digest] = digests_for([operation])
    return digest


def changes_since_last_run(operation: Operation, action: ActionDefinition) -> list[Change]:
    """What differs between the configuration of the operation's last attempt and today's (nothing
    when it never ran, or ran before configurations were recorded)."""
    last = (
        Attempt.objects.filter(operation=operation, config_version__isnull=False)
        .order_by("-number", "-id")
        .values_list("config_version__content", flat=True)
        .first()
    )
    if last is None:
        return []
    now = json.loads(json.dumps(content(operation.workspace_id, action)))  # as stored: JSON values
    return differences(last, now)


def differences(before: dict, after: dict, prefix: str = "") -> list[Change]:
    """Field-by-field differences of two JSON objects, nested ones by dotted name."""
    found = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        field = f"{prefix}{name}"
        if isinstance(old, dict) and isinstance(new, dict):
            found.extend(differences(old, new, prefix=f"{field}."))
        elif canonical_json(old) != canonical_json(new):
            found.append(Change(field, old, new))
    return found


def _plain(value):
    # Windows as people write them ("90d"), so that a change reads as one.
    return policies.format_duration(value) if isinstance(value, timedelta) else value


def _shown(value) -> str:
    return "(none)" if value is None else json.dumps(value, ensure_ascii=False)[:200]
