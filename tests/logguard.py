"""No sensitive value reaches a log line, in any test of the suite (tests/conftest.py runs every test
under a ``LogGuard``).

While a test runs, the guard collects the values of every event that passes intake in a field its
action declares sensitive (at ``ledger.intake.submit._event``, where each validated event is built with its
action), and captures every log record of this process at every level: the root logger and each
logger that does not propagate to it are set to DEBUG and given the guard's handler. At the end of
the test, a value found in a record fails the test.

A record is read as fully as any handler could print it: the message with its arguments, the
exception with its message and traceback (the JSON log withholds exception messages; other handlers
would not), the stack, and every extra attribute. A value is looked for as it was sent, as a key
writes it (percent-encoded) and as JSON escapes it; text of at least 3 characters anywhere in a
record, a number of at least 3 digits as a whole number (4500 leaks in "4500 cents", not in port
45001 nor in a task id such as "a01db4500b91f").
"""

import json
import logging
import re
from urllib.parse import quote

import pytest

# The attributes every record has; anything else on a record came through ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_FORMATTER = logging.Formatter()
# Figures the server produced about a request (django.request's status_code, the access line's
# status and duration), never a value anyone sent: an amount of 200 cents is not the status 200.
_SERVER_FIGURES = {"status", "status_code", "duration_ms"}


def record_text(record: logging.LogRecord) -> str:
    """Everything a handler could print of ``record``."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001  a record whose arguments do not fit its format: read both
        message = f"{record.msg} {record.args}"
    parts = [record.name, message]
    if record.exc_info:
        parts.append(_FORMATTER.formatException(record.exc_info))
    if record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(record.stack_info)
    parts.extend(
        f"{name}={value!s}"
        for name, value in vars(record).items()
        if name not in _STANDARD and not (name in _SERVER_FIGURES and isinstance(value, int | float))
    )
    return "\n".join(parts)


def patterns(value, min_text: int = 3) -> list[re.Pattern]:
    """How ``value`` would show in a log line, if it were logged ([] if too short to tell: text
    shorter than ``min_text``)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        digits = str(abs(value))
        # A whole number: not part of a longer one, nor of a word or a hex id (django-q2 logs
        # each task's uuid, and "...dcb600b9..." is not the amount 600).
        return [re.compile(rf"(?<![0-9A-Za-z]){digits}(?![0-9A-Za-z])")] if len(digits) >= 3 else []
    if isinstance(value, float):
        return patterns(str(value), min_text)
    if not isinstance(value, str):
        return patterns(json.dumps(value, sort_keys=True), min_text)
    if len(value) < min_text:
        return []
    forms = {value, quote(value, safe=""), json.dumps(value)[1:-1]}
    return [re.compile(re.escape(form)) for form in sorted(forms)]


def leaks(lines: list[str], values: list, min_text: int = 3) -> list[tuple[object, str]]:
    """(value, line) for every value found in a line."""
    found = []
    for value in values:
        for pattern in patterns(value, min_text):
            found.extend((value, line) for line in lines if pattern.search(line))
    return found


class _Capture(logging.Handler):
    def __init__(self, lines: list[str]):
        super().__init__(level=logging.NOTSET)
        self.lines = lines

    def emit(self, record):
        self.lines.append(record_text(record))


class LogGuard:
    def __init__(self):
        self.values: list = []
        # Values some event sent in a field that is not sensitive (a fuzzer reuses one string in
        # many fields and events): such a value may rightly appear in a log line (a key).
        self.public: list = []
        self.lines: list[str] = []
        # Text shorter than this is not looked for. A fuzzer's short words ("view") occur in log
        # lines by chance (a path, a logger name): its test raises the bar (tests/api).
        self.min_text = 3
        self._handler = _Capture(self.lines)
        self._restore: list[tuple[logging.Logger, int]] = []
        self._attached: list[logging.Logger] = []

    def collect(self, sensitive_fields, data: dict) -> None:
        self.values.extend(data[name] for name in sensitive_fields if name in data)
        self.public.extend(value for name, value in data.items() if name not in sensitive_fields)

    def start(self) -> None:
        loggers = [logging.getLogger()] + [
            logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
        ]
        for logger in loggers:
            if logger.level != logging.NOTSET:
                self._restore.append((logger, logger.level))
                logger.setLevel(logging.DEBUG)
            if logger is logging.getLogger() or not logger.propagate:
                logger.addHandler(self._handler)
                self._attached.append(logger)

    def stop(self) -> None:
        for logger in self._attached:
            logger.removeHandler(self._handler)
        for logger, level in self._restore:
            logger.setLevel(level)

    def leaks(self) -> list[tuple[object, str]]:
        return leaks(self.lines, [value for value in self.values if value not in self.public], self.min_text)

    def check(self) -> None:
        """Fail the test if a collected value is in a captured record."""
        if found := self.leaks():
            shown = "\n".join(f"{value!r} in: {line[:500]}" for value, line in found[:5])
            pytest.fail(f"{len(found)} log records show a sensitive value:\n{shown}", pytrace=False)
