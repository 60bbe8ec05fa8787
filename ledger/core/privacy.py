"""Sensitive fields: who sees their values, and what a destination said with them masked out.

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

What people write is shown as written: ``ledger.core.sensitive_notes`` refuses a note that quotes a
sensitive value. Erasing one data subject's values is ``ledger.core.erasure``.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ledger.actions import UnknownAction, get_action, registry
from ledger.core import roles, vendor_text
from ledger.core.vendor_text import MASK
from ledger.models import Operation
from ledger.outcomes import OutcomeError

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


def fingerprint_shown(fingerprint: str, action_name: str, *, reveal: bool) -> str:
    """A payload's fingerprint as a reader sees it. It is an unkeyed SHA-256 of the action's
    fingerprint fields (``ledger.keys.fingerprint``): where one of them is sensitive, whoever is
    shown the values masked would find them by hashing guesses (an amount, a customer id), so to
    them it reads ``MASK``. Whoever sees the values sees it: approvers, who decide on it."""
    if reveal or not fingerprint:
        return fingerprint
    try:
        action = get_action(action_name)
    except UnknownAction:
        return MASK
    return MASK if set(action.fingerprint_fields) & set(action.sensitive_fields) else fingerprint


def fingerprints_masked(text: str, action_name: str, *, reveal: bool) -> str:
    """``text`` (an audit message of one of the action's operations: a decision names the payload
    it was made on) with each fingerprint in it masked where ``fingerprint_shown`` masks them."""
    if fingerprint_shown("0" * 64, action_name, reveal=reveal) == MASK:
        return _FINGERPRINT.sub(MASK, text)
    return text


def audit_message_shown(event, user) -> str:
    """An audit event's message as ``user`` reads it (``fingerprints_masked``, for its operation)."""
    if event.operation_id is None:
        return event.message
    # An operation purged since: which of its fields were sensitive cannot be told, as for an
    # action no longer defined.
    action = event.operation.action if event.operation is not None else ""
    return fingerprints_masked(event.message, action, reveal=may_view_sensitive(user, event.workspace_id))


# A payload's fingerprint as a message names it: 64 hexadecimal digits (a key's hash is 32).
_FINGERPRINT = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def _mask(value):
    return value if value == REDACTED else MASK


def redact(values: dict, fields: Iterable[str]) -> dict:
    """A copy of ``values`` with each of ``fields`` that it holds replaced by ``REDACTED``."""
    fields = set(fields)
    return {name: REDACTED if name in fields else value for name, value in values.items()}


def exported(operation: Operation, *, user) -> dict[str, object]:
    """One operation's payload and result as an export's columns (``payload.<field>``,
    ``result.<field>``), masked unless ``user`` may see sensitive values in its workspace.

    The one function CSV exports call for each row, so an export can never show more
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


@dataclass(frozen=True)
class ShownAnswer:
    """What a destination answered one try, as one person sees it: its kept headers and body, and
    whether they are in full (``False``: with long opaque strings blanked)."""

    headers: dict[str, str]
    body: str
    in_full: bool


def answer_shown_to(user, attempt) -> ShownAnswer | None:
    """What ``user``, who sees the attempt's operation, sees of what its destination answered (its
    body and headers); None: nothing (``answer_shown``)."""
    return answer_shown(attempt, configures_destinations=sees_every_answer(user))


def answer_shown(attempt, *, configures_destinations: bool) -> ShownAnswer | None:
    """The attempt's answer as stored (masked after decoding, ``vendor_text.masked``) to whoever
    configures destinations (a superuser): they hold the credential already. Everyone else reads it
    after a stricter pass, ``vendor_text.opaque_blanked``, in case a form of the credential no
    masking foresees hides in a long opaque string; and nothing of an answer kept before masking
    after decoding (``answer_masked_decoded``), which was masked for the literal credential only."""
    if configures_destinations:
        return ShownAnswer(headers=attempt.response_headers, body=attempt.response_body, in_full=True)
    if not attempt.answer_masked_decoded:
        return None
    return ShownAnswer(
        headers={name: vendor_text.opaque_blanked(value) for name, value in attempt.response_headers.items()},
        body=vendor_text.opaque_blanked(attempt.response_body),
        in_full=False,
    )


def sees_every_answer(user) -> bool:
    """Whether ``user`` configures destinations (a superuser), and so sees every answer they gave."""
    return roles.can(user, roles.CONFIGURE, None)


def scrub_failure(error: OutcomeError, operation: Operation, action) -> OutcomeError:
    """``error`` with the operation's sensitive values and the action's secrets masked out of its
    message and its answer, before either is stored: a destination may echo what it was sent
    ("customer C-1001 has no card on file"), the attempt row and the operation's last error are
    shown to everyone who sees the operation, and a credential must never be kept at all. Masked by
    ``vendor_text.masked``: a value where its text appears, decoded or not (case aside), a secret
    in its encoded forms and fragments too; a value written another way (45.00 for 4500) is not."""
    hidden = _hidden(operation, action)
    if hidden is None:
        return error
    error.message = vendor_text.masked(error.message, hidden)
    error.args = (error.message,)
    if error.answer is not None:
        answer = error.answer
        error.answer = replace(
            answer,
            headers={name: vendor_text.masked(value, hidden) for name, value in answer.headers.items()},
            body=vendor_text.masked(answer.body, hidden),
            code=vendor_text.masked(answer.code, hidden),
            said=vendor_text.masked(answer.said, hidden),
        )
    return error


def scrubbed_text(text: str, operation: Operation, action) -> str:
    """``text`` (a lookup's reason, which may quote the destination) masked as ``scrub_failure`` masks."""
    return vendor_text.masked(text, _hidden(operation, action))


def secrets_masked(text: str, actions: Iterable) -> str:
    """``text`` (what went wrong asking the destinations of ``actions``) with their secrets masked."""
    return vendor_text.masked(text, vendor_text.hidden((), [s for action in actions for s in action.secret_values()]))


def refusals_masked(messages: list[str], action_name: str, data: dict) -> list[str]:
    """``messages`` (why an event carrying ``data`` for the action was refused) with the action's
    sensitive values in ``data`` masked where they are quoted: a schema's checker quotes the value it
    refuses (``'C-1001…' is too long``), and a refusal is kept on its delivery, shown to everyone in
    the workspace, as well as answered to the sender."""
    sensitive = sensitive_fields(action_name)
    values = [
        text
        for name, value in data.items()
        if sensitive is None or name in sensitive
        for text in _leaf_texts(value)
        if len(text) >= SHORTEST_MASKED_TEXT
    ]
    hidden = vendor_text.hidden(values, ())
    return [vendor_text.masked(message, hidden) for message in messages]


def _hidden(operation: Operation, action) -> vendor_text.Hidden | None:
    sensitive = sensitive_fields(operation.action)
    payload = operation.payload if isinstance(operation.payload, dict) else {}
    values = [
        text
        for name, value in payload.items()
        if sensitive is None or name in sensitive
        for text in _leaf_texts(value)
        if len(text) >= SHORTEST_MASKED_TEXT and text != REDACTED
    ]
    return vendor_text.hidden(values, action.secret_values() if action is not None else [])


def _leaf_texts(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _leaf_texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _leaf_texts(item)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]
