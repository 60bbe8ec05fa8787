"""What a destination said when it refused or failed a call (``ledger.outcomes.Answer``), read from
its HTTP response: the status, the headers worth keeping, the body up to ``BODY_LIMIT`` bytes, and
the destination's own error code and words where its JSON body holds them.

The code and the words are found by JMESPath expressions: ``DEFAULT_CODE`` and ``DEFAULT_MESSAGE``
read the common shapes (Stripe's ``{"error": {"code", "message"}}``, ``{"code", "message"}``, OAuth's
``{"error", "error_description"}``, RFC 9457's ``{"title", "detail"}``); a configured destination may
name its own code path and a configured action its own message path.

The error's message becomes ``HTTP 400 from host [code]: words``: failure groups keep the bracketed
code as it is and leave the words out (``ledger.reads.failure_groups``), so a destination's 45
reasons for a 400 make as many groups, and one reason in 45 wordings makes one.
"""

import re
from typing import Any

import httpx

from ledger.actions import expressions
from ledger.outcomes import Answer

BODY_LIMIT = 4096
# Headers that help a person act on a refusal (when to try again, what the body is, the vendor's
# id of the request to quote to their support). Every other header is left out: cookies, auth
# challenges and the rest say nothing an operator needs, and may say what no one should keep.
KEPT_HEADERS = (
    "content-type",
    "retry-after",
    "request-id",
    "x-request-id",
    "x-correlation-id",
    "x-github-request-id",
    "x-amzn-requestid",
    "cf-ray",
)
DEFAULT_CODE = "error.code || code || error_code || errors[0].code || (type(error) == 'string' && error || `null`)"
DEFAULT_MESSAGE = "error.message || message || error_description || detail || title || errors[0].message"
# A code is a short token: anything else (a sentence, a number with spaces) is not one.
CODE = re.compile(r"[^\s\[\]]{1,80}")
SAID_LIMIT = 300


def answer_of(response: httpx.Response, *, code_path: str = "", message_path: str = "") -> Answer:
    """The destination's answer in ``response``."""
    body = json_or_none(response)
    return Answer(
        status=response.status_code,
        headers={name: response.headers[name] for name in KEPT_HEADERS if name in response.headers},
        body=bounded(response.content),
        code=_code(expressions.search(code_path or DEFAULT_CODE, body)) if isinstance(body, dict) else "",
        said=_said(body, response, message_path or DEFAULT_MESSAGE),
    )


def failure_message(answer: Answer, host: str) -> str:
    """How a refusal reads on the attempt and the operation: ``HTTP 400 from host [code]: words``."""
    message = f"HTTP {answer.status} from {host}"
    if answer.code:
        message += f" [{answer.code}]"
    if answer.said:
        message += f": {answer.said}"
    return message


def bounded(content: bytes) -> str:
    """The body as text, cut at ``BODY_LIMIT`` bytes (on a character boundary) with a marker."""
    if len(content) <= BODY_LIMIT:
        return content.decode("utf-8", errors="replace")
    kept = content[:BODY_LIMIT].decode("utf-8", errors="ignore")
    return f"{kept}\n… [cut: {len(content):,} bytes in all, the first {BODY_LIMIT:,} kept]"


def json_or_none(response: httpx.Response) -> Any:
    """The response's JSON body, or None when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return None


def _code(found: Any) -> str:
    if isinstance(found, bool) or found is None:
        return ""
    text = str(found).strip()
    return text if CODE.fullmatch(text) else ""


def _said(body: Any, response: httpx.Response, path: str) -> str:
    if isinstance(body, dict):
        said = expressions.search(path, body)
    elif body is None and "html" not in response.headers.get("content-type", ""):
        said = response.text  # a plain-text refusal is its own words; an HTML error page is not
    else:
        said = None
    if said is None or said == "":
        return ""
    text = said if isinstance(said, str) else expressions.as_text(said)
    return " ".join(text.split())[:SAID_LIMIT]
