"""Server errors to Sentry (sentry-sdk), on only when ``SENTRY_DSN`` is set (settings.py), and private
by construction: the same rule as the JSON log (``opsconsole.logging``), nothing that could carry what
was submitted.

What is sent: where (the route template as the transaction, the logger, the frames' files,
functions, lines and source), what (the exception's type, the log record's level), when, which
release, and the request's method and id. What never is: exception messages and log messages
(``(message withheld)``), local variables, request bodies, query strings, headers, cookies and URLs
(a path holds an operation's key), the user, ``extra`` (the log record's context, the command
line), and the text and data of breadcrumbs (SQL, log lines, a destination's URL). The SDK's own
switches say so (``include_local_variables``, ``max_request_body_size``, ``send_default_pii`` left off), and
``scrub_event`` keeps only the fields it names, so a field a later SDK adds is dropped too.
"""

import logging

import sentry_sdk
from sentry_sdk.integrations.django import DjangoIntegration
from sentry_sdk.integrations.httpx import HttpxIntegration
from sentry_sdk.integrations.logging import LoggingIntegration

from opsconsole.logging import request_id

WITHHELD = "(message withheld)"

_EVENT_FIELDS = frozenset(
    {
        "event_id",
        "timestamp",
        "level",
        "platform",
        "logger",
        "transaction",
        "transaction_info",
        "server_name",
        "release",
        "environment",
        "dist",
        "sdk",
        "tags",
        "fingerprint",
        "modules",
        "contexts",
        "exception",
        "threads",
        "breadcrumbs",
        "request",
        "logentry",
    }
)
_CONTEXTS = frozenset({"runtime", "os", "trace"})
_EXCEPTION_FIELDS = frozenset({"type", "module", "mechanism", "stacktrace", "thread_id"})
_FRAME_FIELDS = frozenset(
    {
        "filename",
        "abs_path",
        "function",
        "module",
        "lineno",
        "colno",
        "in_app",
        "pre_context",
        "context_line",
        "post_context",
    }
)
_BREADCRUMB_FIELDS = frozenset({"type", "category", "level", "timestamp"})
_BREADCRUMB_DATA = frozenset({"method", "status_code"})  # of an HTTP call: never its URL


def init_sentry(dsn: str, *, environment: str, release: str = "", transport=None) -> None:
    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        release=release or None,
        transport=transport,
        auto_enabling_integrations=False,
        integrations=[
            DjangoIntegration(transaction_style="url", middleware_spans=False, signals_spans=False, cache_spans=False),
            # Records at INFO and above become breadcrumbs (scrubbed); ERROR and above, events.
            LoggingIntegration(level=logging.INFO, event_level=logging.ERROR),
            HttpxIntegration(),
        ],
        # send_default_pii stays unset, which is off: sentry-sdk 2.75 deprecates passing it at all.
        include_local_variables=False,
        max_request_body_size="never",
        before_send=scrub_event,
        before_breadcrumb=scrub_breadcrumb,
        traces_sample_rate=None,  # latency is the request metrics' job (opsconsole.requests_metrics)
    )


def scrub_event(event: dict, hint: dict | None = None) -> dict:
    """Only the fields named above; messages withheld."""
    event = {name: value for name, value in event.items() if name in _EVENT_FIELDS}
    if "request" in event:
        event["request"] = {"method": event["request"]["method"]} if event["request"].get("method") else {}
    if "contexts" in event:
        event["contexts"] = {name: value for name, value in event["contexts"].items() if name in _CONTEXTS}
    if "logentry" in event:
        event["logentry"] = {"message": WITHHELD}
    for exception in event.get("exception", {}).get("values", []):
        for name in list(exception):
            if name not in _EXCEPTION_FIELDS:
                del exception[name]
        exception["value"] = WITHHELD
        _scrub_frames(exception.get("stacktrace"))
    for thread in event.get("threads", {}).get("values", []):
        _scrub_frames(thread.get("stacktrace"))
    if "breadcrumbs" in event:
        event["breadcrumbs"]["values"] = [scrub_breadcrumb(crumb) for crumb in event["breadcrumbs"].get("values", [])]
    if rid := request_id.get():
        event.setdefault("tags", {})["request_id"] = rid
    return event


def _scrub_frames(stacktrace: dict | None) -> None:
    for frame in (stacktrace or {}).get("frames", []):
        for name in list(frame):
            if name not in _FRAME_FIELDS:
                del frame[name]


def scrub_breadcrumb(crumb: dict, hint: dict | None = None) -> dict:
    """What happened and when, never its text: no message, no data but an HTTP call's method and status."""
    kept = {name: value for name, value in crumb.items() if name in _BREADCRUMB_FIELDS}
    data = {name: value for name, value in (crumb.get("data") or {}).items() if name in _BREADCRUMB_DATA}
    if data and crumb.get("type") == "http":
        kept["data"] = data
    return kept
