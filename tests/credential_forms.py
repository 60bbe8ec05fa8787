"""The forms a careless vendor writes a credential back in, and what counts as
a leak of it, for the tests of masking. Stdlib only, and decoded with the stdlib's own functions
(``html.unescape``, ``urllib.parse.unquote``), so the check is not the masking's code run twice."""

import base64
import html
import html.entities
import re
from urllib.parse import quote, unquote

# An HTML5 name for each character that has one (``_`` is ``&lowbar;``), as an encoder picks them.
_NAMED = {}
for _name, _char in sorted(html.entities.html5.items(), key=lambda item: (not item[0].islower(), item[0])):
    if _name.endswith(";") and len(_char) == 1:
        _NAMED.setdefault(_char, f"&{_name}")


def escaped(secret: str) -> str:
    """``\\u``-escaped, as JSON encoders that escape every character write it."""
    return "".join(f"\\u{ord(char):04x}" for char in secret)


def forms_of(secret: str) -> dict[str, str]:
    """Every form of ``secret`` a careless vendor writes it in, by name, as written."""
    raw = secret.encode()
    b64, b64url = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    return {
        "as it is": secret,
        "upper case": secret.upper(),
        "bearer": f"Bearer {secret}",
        "basic of a pair": "Basic " + base64.b64encode(b"api:" + raw).decode(),
        "basic with no password (Stripe)": "Basic " + base64.b64encode(raw + b":").decode(),
        "base64": b64,
        "base64 unpadded": b64.rstrip("="),
        "base64url": b64url,
        "base64url unpadded": b64url.rstrip("="),
        "percent-encoded": quote(secret, safe=""),
        "percent-encoded, lower-case hex": quote(secret, safe="").lower(),
        "percent-encoded, only some characters": quote(secret, safe="~=?"),
        "percent-encoded twice": quote(quote(secret, safe=""), safe=""),
        "form-encoded in a query": "https://vendor.example/v1?key=" + quote(secret, safe=""),
        "hex": raw.hex(),
        "hex upper case": raw.hex().upper(),
        "hex with colons": ":".join(f"{byte:02x}" for byte in raw),
        "hex with spaces": " ".join(f"{byte:02X}" for byte in raw),
        "utf-16 hex": secret.encode("utf-16-be").hex(),
        "base32": base64.b32encode(raw).decode(),
        "base32 unpadded, lower case": base64.b32encode(raw).decode().rstrip("=").lower(),
        "truncated": secret[:10] + "…",
        "a fragment from the middle": secret[6:16],
        "json-escaped": escaped(secret),
        "json-escaped base64": escaped(b64),
        "json-escaped plus in base64": b64.replace("+", "\\u002b"),
        "json in json (double-escaped)": escaped(secret).replace("\\", "\\\\"),
        "percent-encoded json escapes": quote(escaped(secret), safe=""),
        "x-escaped": "".join(f"\\x{byte:02x}" for byte in raw),
        "html decimal entities": "".join(f"&#{ord(char)};" for char in secret),
        "html hex entities": "".join(f"&#x{ord(char):x};" for char in secret),
        "html named entities": "".join(_NAMED.get(char, char) for char in secret),
        "in groups of 4 by spaces": " ".join(secret[i : i + 4] for i in range(0, len(secret), 4)),
        "in groups of 5 by dashes": "-".join(secret[i : i + 5] for i in range(0, len(secret), 5)),
    }


def _unescaped(text: str) -> str:
    """Backslash escapes decoded once: ``\\uXXXX``, ``\\xXX`` and JSON's one-character ones."""
    simple = {"\\": "\\", "/": "/", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
    return re.sub(
        r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[\\/\"ntrbf])",
        lambda escape: chr(int(escape[1][1:], 16)) if escape[1][0] in "ux" else simple[escape[1]],
        text,
    )


def decodings(text: str) -> list[str]:
    """``text`` and every text reached from it by HTML-unescaping, percent-decoding and backslash-
    unescaping, in any order and any number of times (up to 64 texts)."""
    seen, todo = [], [text]
    while todo and len(seen) < 64:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        todo += [html.unescape(current), unquote(current), _unescaped(current)]
    return seen


def _compact(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _runs(text: str) -> set[str]:
    return {text[i : i + 8] for i in range(len(text) - 7)}


def leaks(text: str, secret: str) -> list[str]:
    """Runs of 8 characters of ``secret``, its base64 (at each alignment), base64url, base32, hex or UTF-16 hex, found
    in ``text`` read any of the ways ``decodings`` reads it, as written or with everything but
    letters and digits left out; [] when there are none."""
    raw = secret.encode()
    encoded = [
        secret,
        *(base64.b64encode(b"\0" * offset + raw).decode()[4 if offset else 0 :] for offset in range(3)),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b32encode(raw).decode(),
        raw.hex(),
        secret.encode("utf-16-be").hex(),
    ]
    runs = set().union(*(_runs(form.lower()) for form in encoded))
    compact_runs = set().union(*(_runs(_compact(form)) for form in encoded))
    found = set()
    for reading in decodings(text):
        found |= runs & _runs(reading.lower())
        found |= compact_runs & _runs(_compact(reading))
    return sorted(found)
