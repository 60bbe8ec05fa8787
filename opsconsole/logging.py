"""JSON log lines: the message plus the ledger's context (key, transition, error category) and the
id of the request being served.

Only fields passed in ``extra`` are added, and callers pass identifiers and states, never payload
text or secrets. A traceback keeps its frames but not the exception's message, which can quote
what was submitted (a database error names the value it refused).
"""

import contextvars
import json
import logging
import traceback

from django.http import HttpRequest

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_JSON_TYPES = frozenset({str, int, float, bool, type(None), list, dict})  # written as they are
_ENCODER = json.JSONEncoder(default=str)  # one encoder: json.dumps(..., default=) would build one per line

# A line carries none of what logging otherwise collects for every record (the caller's file and line,
# found by walking the stack; the thread's and process's names): ~20 % of an access line's CPU
# (bench/profile_request.py). Python's logging documentation, "Optimization".
logging._srcfile = None
logging.logThreads = False
logging.logProcesses = False
logging.logMultiprocessing = False

# The id of the request this thread or task serves (opsconsole.middleware.RequestIdMiddleware).
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # django.request logs a response after the middleware let go of it: then the id is on the request.
        rid = request_id.get() or getattr(getattr(record, "request", None), "request_id", "")
        if rid:
            line["request_id"] = rid
        line.update(
            {k: v if type(v) in _JSON_TYPES else _plain(v) for k, v in vars(record).items() if k not in _STANDARD}
        )
        if record.exc_info:
            line["exception"] = _without_message(*record.exc_info)
        elif record.exc_text:  # withheld already (WithheldExceptionMessage)
            line["exception"] = record.exc_text
        return _ENCODER.encode(line)


class WithheldExceptionMessage(logging.Filter):
    """A logger's records carry their exception as the JSON log writes it, for every handler: the
    traceback and the type, never the message. django.request logs whatever a view raised, and an
    exception's message may quote a payload value (a masking bug's "cannot mask C-1001"); the JSON
    formatter withholds it, but any other handler (a developer's console, an error tracker's) would
    print it from the record."""

    def filter(self, record):
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = _without_message(*record.exc_info)
            record.exc_info = None
        return True


def _plain(value):
    if isinstance(value, HttpRequest):
        # django.request passes the request itself; its repr would carry the query string, where a
        # search may hold a sensitive value. The method and the path are enough.
        return f"{value.method} {value.path}"
    return value if isinstance(value, str | int | float | bool | type(None) | list | dict) else repr(value)


def _without_message(exc_type, exc, tb) -> str:
    frames = "".join(traceback.format_tb(tb))
    name = f"{exc_type.__module__}.{exc_type.__qualname__}"
    return f"Traceback (most recent call last):\n{frames}{name} (message withheld)"
