"""The credential a request carried, and the refusal of a careless vendor that quotes it back in
every form such a vendor writes it (the ``echo_credential`` fault): what masking must find in an
answer before anyone reads it. Stdlib only, like the server."""

from __future__ import annotations

import base64
import html.entities
import json
from urllib.parse import quote

# An HTML5 name for each character that has one (``_`` is ``&lowbar;``), as an encoder picks them.
_HTML_NAMES = {}
for _name, _char in sorted(html.entities.html5.items(), key=lambda item: (not item[0].islower(), item[0])):
    if _name.endswith(";") and len(_char) == 1:
        _HTML_NAMES.setdefault(_char, f"&{_name}")


def credential_of(headers):
    """The credential a request carried: a bearer token, a basic pair (``user:password``) decoded,
    or an ``X-Api-Key``; "" when it carried none."""
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value, validate=True).decode()
        except ValueError:
            return value
    return value or headers.get("X-Api-Key", "")


def credential_echo(credential):
    """A careless vendor's refusal that quotes the credential it was sent, in each form such a
    vendor writes it: the body (JSON text, one string \\u-escaped as some encoders write every
    character) and a request id header built from it. ``reversed_base64`` is a form no masking
    knows of: it shows who sees an answer's body in full."""
    raw = credential.encode()
    b64, b64url = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    escaped = "".join(f"\\u{ord(char):04x}" for char in credential)
    forms = {
        "bearer": f"Bearer {credential}",
        "basic": "Basic " + base64.b64encode(b"api:" + raw).decode(),
        "base64": b64,
        "base64_unpadded": b64.rstrip("="),
        "base64url": b64url,
        "base64url_unpadded": b64url.rstrip("="),
        "base32": base64.b32encode(raw).decode(),
        "percent": quote(credential, safe=""),
        "percent_json_escaped": quote(escaped, safe=""),
        "hex": raw.hex(),
        "hex_upper": raw.hex().upper(),
        "hex_colons": ":".join(f"{byte:02x}" for byte in raw),
        "hex_spaces": " ".join(f"{byte:02x}" for byte in raw),
        "utf16_hex": credential.encode("utf-16-be").hex(),
        "x_escaped": "".join(f"\\x{byte:02x}" for byte in raw),
        "json_in_json": '{"key": "' + escaped + '"}',
        "html_decimal": "".join(f"&#{ord(char)};" for char in credential),
        "html_hex": "".join(f"&#x{ord(char):x};" for char in credential),
        "html_named": "".join(_HTML_NAMES.get(char, char) for char in credential),
        "groups": " ".join(credential[i : i + 4] for i in range(0, len(credential), 4)),
        "dashed": "-".join(credential[i : i + 5] for i in range(0, len(credential), 5)),
        "truncated": credential[:12] + "...",
        "reversed_base64": b64[::-1],
    }
    detail = f"Invalid API key provided: {escaped}; as sent: {forms['basic']}"
    body = '{"error": "invalid_api_key", "detail": "' + detail + '", "received": ' + json.dumps(forms) + "}"
    return body.encode(), [("X-Request-Id", f"req_{b64url.rstrip('=')}")]
