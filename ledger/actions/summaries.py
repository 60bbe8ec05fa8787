"""One line that says what an operation is about, for the console's lists: an action's ``summary``
template over its payload's fields, e.g. ``"{request_id} v{version} · {title}"`` gives
"R-42 v3 · Review renewal options".

Where the identity is sensitive (an email address), nothing of the payload tells two operations
apart: their line begins with the short form of the keyed hash their key carries (``identified``),
"h.888ae93e · Welcome in en · sign-up 1", as other lines begin with their request id; the key beside
it shows the hash in full to everyone anyway.

A template names fields in braces (Python's format syntax, without conversions or format specs).
It may name only fields of the action's schema that are not sensitive: ``problems`` says which
are not, and registering or saving an action with such a template is refused. ``render`` also
leaves out any sensitive field it is given, so a value masked for some person never reaches a list.
"""

from string import Formatter

from ledger.keys import HASHED_PREFIX

# How long a summary may be: a list's cell, not a description.
MAX_LENGTH = 120


def fields_of(template: str) -> list[str]:
    """The payload fields ``template`` names, in order (ValueError: not a template)."""
    return [name for _, name, _, _ in Formatter().parse(template) if name is not None]


def problems(template: str, *, fields: list[str], sensitive: tuple[str, ...] | list[str]) -> list[str]:
    """Why ``template`` may not summarise an action with these schema ``fields``, if it may not."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        return [f"the summary {template!r} is not a template: {exc}"]
    found = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            found.append(f"the summary's {{{name}}} takes no format or conversion")
        elif name not in fields:
            found.append(f"the summary names {{{name}}}, which is not a field of the action's data")
        elif name in sensitive:
            found.append(f"the summary names {{{name}}}, a sensitive field: it would show to people it is masked for")
    return found


def default_template(identity_fields: tuple[str, ...], sensitive: tuple[str, ...] | list[str]) -> str:
    """The summary of an action that declares none: its identity, without what is sensitive
    ("{request_id} v{version}")."""
    shown = [name for name in identity_fields if name not in sensitive]
    return " ".join("v{version}" if name == "version" else f"{{{name}}}" for name in shown)


def render(template: str, payload: dict | None, *, sensitive: tuple[str, ...] | list[str]) -> str:
    """``template`` over ``payload``: a missing field (a payload retention replaced, an older
    schema) reads as nothing, and so does a sensitive one; at most ``MAX_LENGTH`` characters."""
    payload = payload or {}
    parts = []
    for literal, name, _, _ in Formatter().parse(template):
        parts.append(literal)
        if name is not None and name not in sensitive:
            value = payload.get(name)
            parts.append("" if value is None or isinstance(value, dict | list) else str(value))
    text = " ".join("".join(parts).split())
    text = text.strip(" ·-:")
    return text if len(text) <= MAX_LENGTH else text[: MAX_LENGTH - 1] + "…"


# The hex digits of a key's hashed identity a summary shows: enough to tell a day's rows apart.
HASH_SHOWN = 8


def identified(text: str, key: str) -> str:
    """``text`` after the short form of the hashed identity in ``key``, if the key holds one."""
    hashed = next((part for part in key.split(":") if part.startswith(HASHED_PREFIX)), "")
    if not hashed:
        return text
    short = hashed[: len(HASHED_PREFIX) + HASH_SHOWN]
    return f"{short} · {text}" if text else short
