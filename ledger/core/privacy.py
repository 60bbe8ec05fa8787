"""Sensitive fields: who sees their values, and erasing one data subject's values.

An action names its ``sensitive_fields`` (``issue-refund``: the customer id and the amount). Every
place that shows a payload, a result or a conflict's differences (the console, the admin, the API's
operation body, exports) shows it through ``masked`` / ``masked_differences``: those values become
``MASK`` unless the person holds ``roles.VIEW_SENSITIVE`` in the operation's workspace (approvers,
who must see what they sign off, admins and superusers). An operation whose action is no longer
defined has every value masked: which of its fields were sensitive cannot be told.

They never reach a log line: log calls carry keys, states, counts and exception types, and the
JSON log withholds exception messages (``opsconsole.logging``); a test over the whole suite
(tests/conftest.py) fails any test during which one was logged. A sensitive identity field enters
the key as a keyed hash (``ledger.keys``), so keys in URLs, logs and the audit trail reveal nothing.

What people write is shown as written, to everyone in the workspace: ``refuse_sensitive_note``
refuses a reason or note that quotes a sensitive value of what it concerns, naming the field, never
the value; every service that keeps a note calls it before writing anything.

``erase_values`` (``manage.py erase``) replaces one data subject's value of a field by
``REDACTED`` in every payload, result and conflict of a workspace, keeping keys and fingerprints
(a redelivery is still recognised as a duplicate), in one audited transaction.
"""

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.db.models.fields.json import KeyTransform

from ledger.actions import UnknownAction, get_action, registry
from ledger.core import roles
from ledger.core.transitions import record_audit_event
from ledger.models import Conflict, Operation, Workspace
from ledger.outcomes import OutcomeError
from ledger.states import TERMINAL_STATES

MASK = "••••"
# What an erased value (or one retention removed) reads as, to everyone: it is no secret any more.
REDACTED = "[redacted]"


def sensitive_fields(action_name: str) -> frozenset[str] | None:
    """The action's sensitive fields; None when the action is not defined (any field may be)."""
    try:
        return frozenset(get_action(action_name).sensitive_fields)
    except UnknownAction:
        return None


def declared_sensitive() -> frozenset[str]:
    """Every field some registered action declares sensitive."""
    return frozenset(name for action in registry.values() for name in action.sensitive_fields)


def may_view_sensitive(user, workspace_id: int | None) -> bool:
    """Whether ``user`` (None: a machine's token) sees sensitive values in the workspace."""
    return user is not None and roles.can(user, roles.VIEW_SENSITIVE, workspace_id)


def may_view_sensitive_as(user, role: str | None) -> bool:
    """``may_view_sensitive`` in a workspace where ``user``'s role was read already (None: no
    member), as an API token reads it with its person (``accounts.authenticate_token``)."""
    return user is not None and roles.grants(user, role, roles.VIEW_SENSITIVE)


def masked(values, action_name: str, *, reveal: bool):
    """``values`` (a payload or result) as a person sees it: with ``reveal`` as it is, otherwise
    with the action's sensitive values replaced by ``MASK``. Anything but a dict is shown as it is."""
    if reveal or not isinstance(values, dict):
        return values
    sensitive = sensitive_fields(action_name)
    return {name: _mask(value) if sensitive is None or name in sensitive else value for name, value in values.items()}


def masked_differences(differences: list[dict], action_name: str, *, reveal: bool) -> list[dict]:
    """A conflict's differences (``[{"field", "recorded", "incoming"}]``), masked as ``masked``."""
    if reveal:
        return differences
    sensitive = sensitive_fields(action_name)
    return [
        d | {"recorded": _mask(d.get("recorded")), "incoming": _mask(d.get("incoming"))}
        if sensitive is None or d.get("field") in sensitive
        else d
        for d in differences
    ]


def _mask(value):
    return value if value == REDACTED else MASK


def redact(values: dict, fields: Iterable[str]) -> dict:
    """A copy of ``values`` with each of ``fields`` that it holds replaced by ``REDACTED``."""
    fields = set(fields)
    return {name: REDACTED if name in fields else value for name, value in values.items()}


def exported(operation: Operation, *, user) -> dict[str, object]:
    """One operation's payload and result as an export's columns (``payload.<field>``,
    ``result.<field>``), masked unless ``user`` may see sensitive values in its workspace.

    The one function CSV exports (issue 11) call for each row, so an export can never show more
    than the operation page does. Payload columns come in the order of the action's schema (a
    database may store JSON keys in another order), then any others.
    """
    reveal = may_view_sensitive(user, operation.workspace_id)
    row = {}
    for prefix, values in (("payload", operation.payload), ("result", operation.result)):
        shown = masked(values, operation.action, reveal=reveal)
        if not isinstance(shown, dict):
            continue
        for name in sorted(shown, key=_schema_order(operation.action)):
            row[f"{prefix}.{name}"] = shown[name]
    return row


def _schema_order(action_name: str):
    try:
        fields = get_action(action_name).field_names()
    except UnknownAction:
        fields = []
    return lambda name: (fields.index(name), "") if name in fields else (len(fields), name)


# --- what a destination said ------------------------------------------------------------------------

# A value shorter than this is not masked inside free text (a body, a message): "45" would mask
# every 45 in it. Whole values are what identify people and cards; they are longer.
SHORTEST_MASKED_TEXT = 3


def scrub_failure(error: OutcomeError, operation: Operation, action) -> OutcomeError:
    """``error`` with the operation's sensitive values and the action's secrets masked out of its
    message and its answer, before either is stored: a destination may echo what it was sent
    ("customer C-1001 has no card on file"), the attempt row and the operation's last error are
    shown to people who may not see it, and a credential must never be kept at all. A value is
    masked where its text appears (case aside); one written another way (45.00 for 4500) is not."""
    hidden = _hidden_texts(operation, action)
    if not hidden:
        return error
    error.message = _masked_text(error.message, hidden)
    error.args = (error.message,)
    if error.answer is not None:
        answer = error.answer
        error.answer = replace(
            answer,
            headers={name: _masked_text(value, hidden) for name, value in answer.headers.items()},
            body=_masked_text(answer.body, hidden),
            code=_masked_text(answer.code, hidden),
            said=_masked_text(answer.said, hidden),
        )
    return error


def scrubbed_text(text: str, operation: Operation, action) -> str:
    """``text`` (a lookup's reason, which may quote the destination) masked as ``scrub_failure`` masks."""
    hidden = _hidden_texts(operation, action)
    return _masked_text(text, hidden) if hidden else text


def _hidden_texts(operation: Operation, action) -> re.Pattern | None:
    sensitive = sensitive_fields(operation.action)
    payload = operation.payload if isinstance(operation.payload, dict) else {}
    texts = [
        text
        for name, value in payload.items()
        if sensitive is None or name in sensitive
        for text in _leaf_texts(value)
        if len(text) >= SHORTEST_MASKED_TEXT and text != REDACTED
    ]
    texts += [secret for secret in (action.secret_values() if action is not None else []) if secret]
    if not texts:
        return None
    # Longest first: a value that contains another is masked whole.
    return re.compile("|".join(re.escape(text) for text in sorted(set(texts), key=len, reverse=True)), re.IGNORECASE)


def _leaf_texts(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _leaf_texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _leaf_texts(item)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _masked_text(text: str, hidden: re.Pattern) -> str:
    return hidden.sub(MASK, text) if text else text


# --- notes and reasons people write ----------------------------------------------------------------


class SensitiveNote(Exception):
    """A note or reason quotes a sensitive value of what it concerns: refused before anything is
    written. The message names the field it matched and never the value."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


def refuse_sensitive_note(
    text: str,
    concerns: Iterable[Operation | Conflict],
    *,
    label: str = "reason",
    error: type[SensitiveNote] = SensitiveNote,
) -> None:
    """Raise ``error`` when ``text`` (a reason or note a person wrote, ``label``) contains a sensitive
    value of the operations or conflicts it concerns: their payloads and results, a conflict's
    incoming payload, as ``masked`` would hide them. A note is kept in the audit trail, on the
    operation page, the controls page or the bulk action, where everyone in the workspace reads it
    as written, viewers and operators too; it is refused whoever the members are today (a viewer
    added next year reads it too). The one check every entry point reaches through its service
    (the console and the management commands; the admin and the API take no note today).

    Matched: each value case-insensitively (Unicode NFKC, ``casefold``), whitespace runs as one
    space, as a whole word (``C-1001`` is not found in ``C-10010``), a number also with thousands
    separators (``4,500``) and a money amount also in its currency's units (``45.00``, ``45,00``).
    Not caught: values shorter than ``SHORTEST_MASKED_TEXT``, a value written another way
    (spelled out, abbreviated, split, a phone number's digits regrouped, an amount whose currency
    has other than two decimals written in units), and anything not among the values of what the
    note concerns (a pause concerns no operation). The refusal confirms a guess to its writer:
    it is no secret from them that they typed it, and nothing is kept of the attempt.
    """
    said = _comparable(text or "")
    if len(said) < SHORTEST_MASKED_TEXT:
        return
    concerns = list(concerns)
    one = len({c.pk if isinstance(c, Operation) else c.operation_id for c in concerns}) == 1
    for concern in concerns:
        if field := _quoted(said, _sensitive_forms(concern)):
            raise error(
                f"The {label} contains the {field} of {_where(concern, one=one)}; sensitive values are masked "
                f"for {_masked_for()}: describe it without the value. Nothing was changed.",
                field=field,
            )


def readers_of(where: Workspace | str) -> str:
    """Who reads what a person writes in a form: everyone in ``where`` (a workspace, or words
    naming several), viewers included; said beside every note and reason field."""
    if isinstance(where, Workspace):
        where = f"everyone in workspace {where.slug}"
    return (
        f"Visible to {where}, including {_masked_for()}, who do not see sensitive values: "
        "a note that quotes one is refused."
    )


def _quoted(said: str, forms: Iterable[tuple[str, str]]) -> str | None:
    """The field of the first of ``forms`` (``(field, form)``) that ``said`` contains as a whole word."""
    for field, form in forms:
        if form in said and re.search(rf"(?<!\w){re.escape(form)}(?!\w)", said):
            return field
    return None


def _masked_for() -> str:
    return " and ".join(f"{role}s" for role in roles.GRANTS if role not in roles.roles_granting(roles.VIEW_SENSITIVE))


def _where(concern: Operation | Conflict, *, one: bool) -> str:
    if isinstance(concern, Conflict):
        return f"the incoming payload of conflict {concern.pk}"
    return "this operation" if one else f"operation {concern.key}"


def _sensitive_forms(concern: Operation | Conflict):
    """``(field, written form)`` for each sensitive value ``concern`` holds, as ``_comparable`` writes them."""
    if isinstance(concern, Conflict):
        action_name, held = concern.operation.action, [concern.incoming_payload]
    else:
        action_name, held = concern.action, [concern.payload, concern.result]
    sensitive = sensitive_fields(action_name)
    action = registry.get(action_name)
    money = action.money_fields if action else {}
    for values in held:
        if not isinstance(values, dict):
            continue
        for field, value in values.items():
            if sensitive is not None and field not in sensitive:
                continue
            for leaf in _leaves(value):
                for form in _written_forms(leaf, money=field in money):
                    if len(form) >= SHORTEST_MASKED_TEXT:
                        yield field, form


def _leaves(value) -> list:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value is None or isinstance(value, bool) or value == REDACTED else [value]


def _written_forms(value, *, money: bool = False) -> set[str]:
    """The ways a person would write ``value``: as it is and, for a number, with thousands
    separators and (a money amount in minor units) in its currency's units with two decimals."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        return {_comparable(str(value))}
    forms = {str(value), f"{value:,}", f"{value:,}".replace(",", " "), f"{value:,}".replace(",", ".")}
    if money:
        units = f"{Decimal(value).scaleb(-2):,.2f}"  # 4500 -> 45.00, 123456 -> 1,234.56
        forms |= {units, units.replace(",", ""), units.replace(",", " "), _swap_separators(units)}
        forms |= {form.replace(".", ",") for form in (units.replace(",", ""), units.replace(",", " "))}
    return forms


def _swap_separators(number: str) -> str:
    """``1,234.56`` -> ``1.234,56``."""
    return number.translate(str.maketrans(",.", ".,"))


def _comparable(text: str) -> str:
    """``text`` as notes and values are compared: NFKC, case folded, whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


# --- erasing one data subject ----------------------------------------------------------------------


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
    written = [(field, form) for candidate in candidates for form in _written_forms(candidate, money=money)]
    if _quoted(_comparable(reason), written):
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


def _forms(value: str, field: str = "") -> list:
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
    forms = list(dict.fromkeys(form for form in forms if isinstance(form, str)))
    if re.fullmatch(r"-?\d{1,18}", value):
        forms.append(int(value))
    return forms


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
