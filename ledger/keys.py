"""Operation keys and payload fingerprints: pure functions of data.

A key names the business action (workspace, the action's identity fields, the action), never a
delivery: two deliveries of one event share a key. Each component is percent-encoded, so a ``:``
inside a request id cannot forge another request's key. ``KEY_RECIPE`` is stored on every
operation, so a future change of recipe is visible instead of silently re-keying history.
"""

import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from urllib.parse import quote

KEY_RECIPE = 1


def _normalise(value):
    """Unicode NFC for every string, recursively, so equal text always hashes equal."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        return {_normalise(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value) -> str:
    """Sorted keys, no insignificant white space, NFC strings, UTF-8 kept as text."""
    return json.dumps(
        _normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def fingerprint(data: Mapping, fields: Sequence[str]) -> str:
    """SHA-256 of the canonical JSON of the named business fields (transport metadata excluded)."""
    business = {field: data.get(field) for field in fields}
    return hashlib.sha256(canonical_json(business).encode("utf-8")).hexdigest()


def _component(value) -> str:
    return quote(unicodedata.normalize("NFC", str(value)), safe="")


def build_key(workspace: str, action: str, identity: Sequence[tuple[str, object]]) -> str:
    """Recipe 1: ``workspace:identity...:action``; a field named ``version`` is written ``v<N>``.

    >>> build_key("demo", "prepare-brief", [("request_id", "R-42"), ("version", 3)])
    'demo:R-42:v3:prepare-brief'
    """
    parts = [_component(workspace)]
    for name, value in identity:
        parts.append(f"v{_component(value)}" if name == "version" else _component(value))
    parts.append(_component(action))
    return ":".join(parts)
