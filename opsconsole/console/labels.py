"""Payload fields (and a conflict's differences) as people read them: each labelled with its
action's schema title ("Amount"), or its name humanised ("Customer ID") where the schema gives
none, never the raw name; in the schema's order, money written with its currency
(``money.shown_payload``). Only presentation: exports and the API keep the field names, which
machines read."""

import json

from ledger.actions.base import humanised
from opsconsole.console import money


def field_label(definition, name: str) -> str:
    """The label of field ``name`` of ``definition`` (None: an action no longer defined)."""
    return definition.field_label(name) if definition is not None else humanised(name)


def payload_rows(payload, definition) -> list[tuple[str, object]]:
    """``payload`` (already masked for the person) as (label, value) pairs in the schema's order,
    then any field the schema does not name."""
    shown = money.shown_payload(payload, definition)
    if not isinstance(shown, dict):
        return []
    order = definition.field_names() if definition is not None else []
    names = sorted(shown, key=lambda name: (order.index(name), "") if name in order else (len(order), name))
    return [(field_label(definition, name), _shown_value(shown[name])) for name in names]


def _shown_value(value):
    """A nested object or list as JSON, as the sender wrote it (not Python's repr, None and quotes)."""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value


def difference_rows(differences: list[dict], definition, *, recorded, incoming) -> list[dict]:
    """A conflict's differences (already masked for the person) as people read them: each with its
    field's ``label``, money amounts in the currency of their side (``money.shown_differences``)."""
    shown = money.shown_differences(differences, definition, recorded=recorded, incoming=incoming)
    return [d | {"label": field_label(definition, d.get("field", ""))} for d in shown]
