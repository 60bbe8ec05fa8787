"""Notes and reasons people write: refused when they quote a sensitive value of what they concern.

What people write is shown as written, to everyone in the workspace: ``refuse_sensitive_note``
refuses a reason or note that quotes a sensitive value of what it concerns, naming the field, never
the value; every service that keeps a note calls it before writing anything. ``readers_of`` says
beside each note field who reads it. The same matching keeps an erasure's reason from quoting the
erased value (``ledger.core.erasure``).
"""

import re
import unicodedata
from collections.abc import Iterable
from decimal import Decimal

from ledger.actions import registry
from ledger.core import roles
from ledger.core.privacy import REDACTED, SHORTEST_MASKED_TEXT, sensitive_fields
from ledger.models import Conflict, Operation, Workspace


class SensitiveNote(Exception):
    """A note or reason quotes a sensitive value of what it concerns: refused before anything is
    written. The message names the field it matched and never the value."""

    def __init__(self, message: str, *, field: str, label: str = "reason"):
        super().__init__(message)
        self.field = field
        self.label = label  # what the person wrote it in: "reason", "note", "record id"


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
    (the console, the management commands and the API; the admin takes no note today).

    Matched: each value case-insensitively (Unicode NFKC, ``casefold``), whitespace runs as one
    space, as a whole word (``C-1001`` is not found in ``C-10010``), a number also with thousands
    separators (``4,500``) and a money amount also in its currency's units (``45.00``, ``45,00``).
    Not caught: values shorter than ``SHORTEST_MASKED_TEXT``, a value written another way
    (spelled out, abbreviated, split, a phone number's digits regrouped, an amount whose currency
    has other than two decimals written in units), and anything not among the values of what the
    note concerns (a pause concerns no operation). The refusal confirms a guess to its writer:
    it is no secret from them that they typed it, and nothing is kept of the attempt.
    """
    said = comparable(text or "")
    if len(said) < SHORTEST_MASKED_TEXT:
        return
    concerns = list(concerns)
    one = len({c.pk if isinstance(c, Operation) else c.operation_id for c in concerns}) == 1
    for concern in concerns:
        if field := quoted(said, _sensitive_forms(concern)):
            raise error(
                f"The {label} contains the {field} of {_where(concern, one=one)}; sensitive values are masked "
                f"for {_masked_for()}: describe it without the value. Nothing was changed.",
                field=field,
                label=label,
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


def quoted(said: str, forms: Iterable[tuple[str, str]]) -> str | None:
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
    """``(field, written form)`` for each sensitive value ``concern`` holds, as ``comparable`` writes them."""
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
                for form in written_forms(leaf, money=field in money):
                    if len(form) >= SHORTEST_MASKED_TEXT:
                        yield field, form


def _leaves(value) -> list:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value is None or isinstance(value, bool) or value == REDACTED else [value]


def written_forms(value, *, money: bool = False) -> set[str]:
    """The ways a person would write ``value``: as it is and, for a number, with thousands
    separators and (a money amount in minor units) in its currency's units with two decimals."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        return {comparable(str(value))}
    forms = {str(value), f"{value:,}", f"{value:,}".replace(",", " "), f"{value:,}".replace(",", ".")}
    if money:
        units = f"{Decimal(value).scaleb(-2):,.2f}"  # 4500 -> 45.00, 123456 -> 1,234.56
        forms |= {units, units.replace(",", ""), units.replace(",", " "), _swap_separators(units)}
        forms |= {form.replace(".", ",") for form in (units.replace(",", ""), units.replace(",", " "))}
    return forms


def _swap_separators(number: str) -> str:
    """``1,234.56`` -> ``1.234,56``."""
    return number.translate(str.maketrans(",.", ".,"))


def comparable(text: str) -> str:
    """``text`` as notes and values are compared: NFKC, case folded, whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
