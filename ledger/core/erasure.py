"""Erasing one data subject's values of a sensitive field (``manage.py erase``).

``erase_values`` replaces one data subject's value of a field by ``REDACTED`` in every payload,
result and conflict of a workspace, keeping keys and fingerprints (a redelivery is still recognised
as a duplicate), in one audited transaction.
"""

import re
import unicodedata
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.db.models.fields.json import KeyTransform

from ledger.actions import registry
from ledger.core import roles
from ledger.core.privacy import REDACTED, declared_sensitive, redact
from ledger.core.sensitive_notes import comparable, quoted, written_forms
from ledger.core.transitions import record_audit_event
from ledger.models import Conflict, Operation, Workspace
from ledger.states import TERMINAL_STATES


class ErasureError(Exception):
    """The erasure is not possible; the message says why (and never quotes the value)."""


@dataclass(frozen=True)
class Erasure:
    """How many rows held the value (and were redacted, unless it was a dry run)."""

    payloads: int  # operations whose payload held it
    results: int  # operations whose result held it
    conflict_payloads: int  # conflicts whose incoming payload held it
    conflict_differences: int  # conflicts whose differences showed it (recorded or incoming)

    def describe(self) -> str:
        return (
            f"{self.payloads} operation payloads, {self.results} results, {self.conflict_payloads} conflict "
            f"payloads, {self.conflict_differences} conflict differences"
        )


def erase_values(*, workspace: Workspace, field: str, value: str, user, reason: str, dry_run: bool = False) -> Erasure:
    """Replace ``value`` of ``field`` by ``REDACTED`` wherever the workspace holds it: operation
    payloads and results, conflicts' incoming payloads and differences. Keys and fingerprints stay,
    so a redelivery of an erased event is still a duplicate. One transaction, the rows locked
    (``FOR UPDATE``), with one audit event naming the field, the counts and
    the reason, never the value.

    ``value`` comes as text (a command line): a stored number matches its digits. ``user`` needs
    ``roles.ERASE`` in the workspace; ``field`` must be declared sensitive by some action. Refused
    (nothing changes) while an operation holding the value has not finished: it would run, or be
    replayed, with the redacted value; cancel it or let it finish first. ``dry_run`` counts only.
    """
    if not roles.can(user, roles.ERASE, workspace.pk):
        raise ErasureError(roles.refusal(user, roles.ERASE, workspace))
    declared = declared_sensitive()
    if field not in declared:
        raise ErasureError(
            f"No action declares {field!r} sensitive; sensitive fields: {', '.join(sorted(declared)) or 'none'}."
        )
    if not value:
        raise ErasureError("Give the value to erase.")
    candidates = _forms(value, field)
    if not reason.strip():
        raise ErasureError("Say why (a request reference, not the value): the reason is kept in the audit trail.")
    money = any(field in action.money_fields for action in registry.values())
    written = [(field, form) for candidate in candidates for form in written_forms(candidate, money=money)]
    if quoted(comparable(reason), written):
        raise ErasureError("The reason quotes the value: it would be kept in the audit trail. Give a reference.")
    with transaction.atomic():
        # Lock order (docs/architecture.md): every row it changes, locked in id order, before the audit
        # chain (appended last).
        operations = list(
            _holding(Operation.objects.filter(workspace=workspace), ("payload", "result"), field, candidates)
            .select_for_update()
            .order_by("pk")
        )
        # A conflict's differences are a list of fields: every conflict that differs on the
        # field is read, and the value looked for here.
        conflicts = _holding(
            Conflict.objects.filter(operation__workspace=workspace),
            ("incoming_payload",),
            field,
            candidates,
            also=Q(differences__icontains=f'"{field}"'),
        )
        conflicts = list(conflicts.select_related("operation").select_for_update(of=("self",)).order_by("pk"))
        payloads, results = _redact_operations(operations, field, candidates)
        changed, conflict_payloads, conflict_differences = _redact_conflicts(conflicts, field, candidates)
        _refuse_unfinished([*operations, *(conflict.operation for conflict in changed)])
        erasure = Erasure(payloads, results, conflict_payloads, conflict_differences)
        if dry_run:
            return erasure
        Operation.objects.bulk_update(operations, ["payload", "result"])
        Conflict.objects.bulk_update(changed, ["incoming_payload", "differences"])
        record_audit_event(
            actor=user.get_username(),
            kind="erased",
            workspace=workspace,
            message=f"erased one data subject's {field}: {erasure.describe()}; reason: {reason}",
        )
    return erasure


def _redact_operations(operations: list[Operation], field: str, candidates: list) -> tuple[int, int]:
    """Redact the operations in memory; how many payloads and results held the value."""
    payloads = results = 0
    for operation in operations:
        if (payload := _redacted(operation.payload, field, candidates)) is not None:
            operation.payload, payloads = payload, payloads + 1
        if (result := _redacted(operation.result, field, candidates)) is not None:
            operation.result, results = result, results + 1
    return payloads, results


def _redact_conflicts(conflicts: list[Conflict], field: str, candidates: list) -> tuple[list[Conflict], int, int]:
    """Redact the conflicts in memory; the changed ones, how many payloads and differences held it."""
    changed = []
    payloads = differences = 0
    for conflict in conflicts:
        incoming = _redacted(conflict.incoming_payload, field, candidates)
        redacted = [_redacted_difference(d, field, candidates) for d in conflict.differences]
        if incoming is None and redacted == conflict.differences:
            continue
        if incoming is not None:
            conflict.incoming_payload, payloads = incoming, payloads + 1
        if redacted != conflict.differences:
            conflict.differences, differences = redacted, differences + 1
        changed.append(conflict)
    return changed, payloads, differences


def _forms(value: str, field: str = "") -> list[str | int]:
    """The stored values ``value`` (text from a command line) stands for: the text, in either
    Unicode normal form, as each action that normalises ``field`` stores it (an email address
    typed ``Ann@Example.COM`` is held as ``Ann@example.com``), and the number its digits spell."""
    forms = [value, unicodedata.normalize("NFC", value), unicodedata.normalize("NFD", value)]
    for action in registry.values():
        if normalise := action.normalisers.get(field):
            try:
                forms.append(normalise(value))
            except (ValueError, TypeError):
                pass  # not a value this action could have stored
    distinct: list[str | int] = list(dict.fromkeys(form for form in forms if isinstance(form, str)))
    if re.fullmatch(r"-?\d{1,18}", value):
        distinct.append(int(value))
    return distinct


def _holding(queryset, columns: tuple[str, ...], field: str, candidates: list, *, also: Q | None = None):
    """The rows whose JSON ``columns`` hold one of ``candidates`` under ``field`` (or match ``also``).

    Aliased key transforms rather than ``payload__<field>``: the field name is data here.
    """
    aliases = {f"_held_{index}": KeyTransform(field, column) for index, column in enumerate(columns)}
    found = also or Q()
    for alias in aliases:
        for candidate in candidates:
            found |= Q(**{alias: candidate})
    return queryset.alias(**aliases).filter(found)


def _matches(stored, candidates: list) -> bool:
    # By type too: the number 1 is not the text "1", and True is not 1.
    return any(type(stored) is type(candidate) and stored == candidate for candidate in candidates)


def _redacted(values, field: str, candidates: list) -> dict | None:
    """``values`` with ``field`` redacted, or None when it does not hold one of ``candidates``."""
    if isinstance(values, dict) and field in values and _matches(values[field], candidates):
        return redact(values, [field])
    return None


def _redacted_difference(difference: dict, field: str, candidates: list) -> dict:
    if difference.get("field") != field:
        return difference
    return difference | {
        side: REDACTED for side in ("recorded", "incoming") if _matches(difference.get(side), candidates)
    }


def _refuse_unfinished(operations: list[Operation]) -> None:
    unfinished = sorted({operation.key for operation in operations if operation.state not in TERMINAL_STATES})
    if unfinished:
        shown = ", ".join(unfinished[:5]) + (f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else "")
        raise ErasureError(
            f"{len(unfinished)} operations holding the value have not finished ({shown}): they would run or be "
            "replayed with the redacted value. Cancel them or let them finish, then erase; nothing was changed."
        )
