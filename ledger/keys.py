"""Operation keys and payload fingerprints: pure functions of data.

A key names the business action (workspace, the action's identity fields, the action), never a
delivery: two deliveries of one event share a key. Each component is percent-encoded, so a ``:``
inside a request id cannot forge another request's key. ``KEY_RECIPE`` is stored on every
operation, so a future change of recipe is visible instead of silently re-keying history.

A sensitive identity field (an email address as a request id) never enters a key in clear: it is
written ``h.`` and a keyed hash (HMAC-SHA256 under ``OPSCONSOLE_KEY_SECRET``, truncated to 128
bits) of the workspace, the field and the value, so keys in URLs, logs and the audit trail reveal
nothing, while the same value still gives the same key (duplicates are recognised). This is part of
recipe 1: no action had a sensitive identity field before, so no stored key changed. The secret is
part of every such key: changed, the same event gets another key.
"""

import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from urllib.parse import quote

import idna

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
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fingerprint(data: Mapping, fields: Sequence[str]) -> str:
    """SHA-256 of the canonical JSON of the named business fields (transport metadata excluded)."""
    business = {field: data.get(field) for field in fields}
    return hashlib.sha256(canonical_json(business).encode("utf-8")).hexdigest()


def _component(value) -> str:
    return quote(unicodedata.normalize("NFC", str(value)), safe="")


HASHED_PREFIX = "h."


def hashed_component(workspace: str, name: str, value, *, secret: str) -> str:
    """``h.`` and the first 32 hex digits of HMAC-SHA256(secret, workspace, field, NFC value), each
    written as its length in UTF-8 bytes, a colon and its text (so no two inputs share an encoding).
    The workspace and field are in it so the same address links neither workspaces nor fields."""
    if not secret:
        raise ValueError("a sensitive identity field needs a key secret (OPSCONSOLE_KEY_SECRET)")
    text = [workspace, name, str(value)]
    message = "".join(f"{len(part.encode())}:{part}" for part in (unicodedata.normalize("NFC", t) for t in text))
    digest = hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()
    return HASHED_PREFIX + digest[:32]


def build_key(
    workspace: str,
    action: str,
    identity: Sequence[tuple[str, object]],
    *,
    sensitive: Collection[str] = (),
    secret: str = "",
) -> str:
    """Recipe 1: ``workspace:identity...:action``; a field named ``version`` is written ``v<N>``, a
    field in ``sensitive`` as its keyed hash (``hashed_component``).

    >>> build_key("demo", "prepare-brief", [("request_id", "R-42"), ("version", 3)])
    'demo:R-42:v3:prepare-brief'
    >>> build_key("demo", "send-welcome", [("email", "ann@example.com"), ("version", 1)], sensitive={"email"},
    ...           secret="s")
    'demo:h.c1ea854bb522108ca386057063f5d8ad:v1:send-welcome'
    """
    parts = [_component(workspace)]
    for name, value in identity:
        if name in sensitive:
            parts.append(hashed_component(workspace, name, value, secret=secret))
        elif name == "version":
            parts.append(f"v{_component(value)}")
        else:
            parts.append(_component(value))
    parts.append(_component(action))
    return ":".join(parts)


# --- identity normalisers -------------------------------------------------------------------------
#
# Every identity field of every action declares how equivalent spellings of one identity become one
# value (``ActionDefinition.normalisers``); intake applies it before anything is stored,
# fingerprinted or keyed, so the normalised value is the one the ledger holds. A normaliser is
# idempotent and raises ``ValueError`` with the rule broken (never the value). The patterns are
# published in the API's schema as they are enforced here (Python ``re``, matched whole), written
# with ``\uXXXX`` escapes that JSON Schema (ECMA 262) and Python read alike.

# Unicode's control characters (category Cc): invisible, and a different identity to a key.
CONTROL = "\\u0000-\\u001f\\u007f-\\u009f"
# Blank (white space that is not a control character): Unicode's White_Space, and the BOM (which
# ECMA 262's \s counts as one).
BLANK = " \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
# An opaque identifier (a request id): anything but control characters, not blank.
IDENTIFIER_PATTERN = f"^[^{CONTROL}]*[^{CONTROL}{BLANK}][^{CONTROL}]*$"
# An email address: local part and domain, no control characters or blanks inside, blanks around.
EMAIL_PATTERN = f"^[{BLANK}]*[^@{CONTROL}{BLANK}]+@[^@{CONTROL}{BLANK}]+[{BLANK}]*$"

_CONTROL = re.compile(f"[{CONTROL}]")
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
_EMAIL = re.compile(EMAIL_PATTERN)
_BLANKS_AROUND = re.compile(f"^[{BLANK}]+|[{BLANK}]+$")


def identifier(value: str) -> str:
    """An opaque identifier, kept exactly as sent (case and spaces are part of it), in Unicode NFC;
    one with a control character is refused (it would be another key that looks the same)."""
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError("must not be blank")
    return unicodedata.normalize("NFC", value)


def whole_number(value: int) -> int:
    """A version: the schema already holds it to a strict integer, which has one spelling."""
    return value


def email_address(value: str) -> str:
    """One mailbox, one spelling: NFC, the blanks around it trimmed, the domain lower-cased in its
    ASCII (IDNA, UTS 46) form without the DNS root's trailing dot, so ``Ann@Bücher.Example``,
    ``Ann@xn--bcher-kva.example`` and ``Ann@bücher.example.`` are one address. The local part is
    kept as sent: only the receiving server may say that ``Ann`` and ``ann`` are one mailbox
    (RFC 5321), so they stay two identities. Control characters, blanks inside, no or two ``@``, a
    domain with an empty label (``a..b``, ``.a``) and one IDNA refuses are refused."""
    text = unicodedata.normalize("NFC", value)
    if _CONTROL.search(text):
        raise ValueError("must not contain control characters")
    if not _EMAIL.fullmatch(text):
        raise ValueError("must be an email address: local-part@domain, without spaces inside")
    local, domain = _BLANKS_AROUND.sub("", text).split("@")
    return f"{local}@{_domain(domain)}"


def _domain(domain: str) -> str:
    # One trailing dot is the DNS root, written out: the same domain. Any other empty label is
    # no domain (and stripping every dot would make ``a..`` and ``a.`` one domain).
    domain = domain.removesuffix(".")
    if "" in domain.split("."):
        raise ValueError("must have a valid domain name (no empty label)")
    if domain.isascii():
        return domain.lower()
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        # idna's message quotes the domain: not passed on.
        raise ValueError("must have a valid domain name (IDNA)") from None
