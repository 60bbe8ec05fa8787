"""What a sender's bytes say, read as the ledger reads them: JSON (UTF-8 only, every key once, no
number too long to convert or too large for a double, no nesting deeper than anything walks), and
text the database can store. Every entry point decodes events through ``decode_json``; intake names
the fields whose text or number cannot be stored (``unstorable_errors``)."""

import json
import math
import sys
from typing import Any

from ledger.actions import FieldError

NUL = "\x00"
# Deeper than any envelope needs (a batch event's data is four levels down), and shallow enough
# that nothing which walks a body recursively can exhaust Python's recursion limit.
MAX_NESTING = 64


class MalformedJSON(ValueError):
    """The body is not JSON the ledger can read. The message says why, never what was sent."""

    reason = "malformed_json"

    @property
    def errors(self) -> list[dict]:
        return [{"field": "body", "message": str(self)}]


class DuplicateKey(MalformedJSON):
    """An object of the body names a key twice. JSON parsers disagree on which one counts (Python's
    takes the last), so a sender's mistake would become another business action: refused, naming
    the path of each key (``data.version``, ``events[3].data``)."""

    reason = "duplicate_key"

    def __init__(self, paths: list[str]):
        self.paths = paths
        super().__init__("a key appears more than once in an object")

    @property
    def errors(self) -> list[dict]:
        return [
            {"field": path, "message": "appears more than once in its object; send each key once"}
            for path in self.paths
        ]


# At most this many duplicate keys are named in an answer.
MAX_DUPLICATES_NAMED = 10


def decode_json(body: bytes | str) -> Any:
    """The decoded body, or ``MalformedJSON`` (``DuplicateKey`` among them): every entry point
    decodes events through here. Bytes must be UTF-8 (RFC 8259; a leading byte order mark is
    ignored): Python's own guess at UTF-16 or UTF-32 is not made."""
    try:
        text = body.decode("utf-8-sig") if isinstance(body, bytes | bytearray) else body
        value = _loads(text, _unique_keys)
    except _Duplicated:
        raise DuplicateKey(_duplicate_paths(text)) from None
    except json.JSONDecodeError as exc:
        raise MalformedJSON(f"malformed JSON: {exc}") from None
    except UnicodeDecodeError:
        raise MalformedJSON("malformed JSON: the body is not UTF-8 text") from None
    except RecursionError:
        raise MalformedJSON("malformed JSON: nested too deeply") from None
    if _nested_deeper_than(value, MAX_NESTING):
        raise MalformedJSON(f"malformed JSON: nested deeper than {MAX_NESTING} levels")
    return value


def _loads(text: str, object_pairs_hook) -> Any:
    """``text`` as JSON under the ledger's rules for numbers, each object built by the hook."""
    return json.loads(
        text,
        parse_int=_parse_int,
        parse_float=_parse_float,
        parse_constant=_refuse_constant,
        object_pairs_hook=object_pairs_hook,
    )


class _Duplicated(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _Duplicated
    return value


class _Pairs(list):
    """An object as it was written, every key kept (to find where the duplicates are)."""


def _duplicate_paths(text: str) -> list[str]:
    """The path of each key named twice in its object, in document order. Only when a body has a
    duplicate: it is parsed once more keeping every pair, and walked without recursion."""
    try:
        tree = _loads(text, _Pairs)
    except (ValueError, RecursionError):
        return ["body"]  # something later in it is malformed too: the duplicate is still refused
    found: list[str] = []
    stack = [("", tree)]
    while stack and len(found) < MAX_DUPLICATES_NAMED:
        path, value = stack.pop()
        children = []
        if isinstance(value, _Pairs):
            seen = set()
            for name, item in value:
                child = f"{path}.{_key_name(name)}" if path else _key_name(name)
                if name in seen and child not in found:
                    found.append(child)
                seen.add(name)
                children.append((child, item))
        elif isinstance(value, list):
            children = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
        stack.extend(reversed(children))
    return found[:MAX_DUPLICATES_NAMED] or ["body"]


def _key_name(name: str) -> str:
    return storable(printable(name[:100]))


def _parse_int(digits: str) -> int:
    # Python refuses to convert longer numbers (a ValueError); said here, before it tries.
    limit = sys.get_int_max_str_digits()
    if limit and len(digits.lstrip("-")) > limit:
        raise MalformedJSON(f"malformed JSON: a number has more than {limit} digits")
    return int(digits)


def _parse_float(text: str) -> float:
    # A number with a fraction or an exponent beyond a double's range (1e400) would become
    # infinity, which neither JSON nor PostgreSQL's jsonb can hold: said here, as malformed.
    value = float(text)
    if math.isinf(value):
        raise MalformedJSON("malformed JSON: a number is too large (beyond ±1.7976931348623157e308)")
    return value


def _refuse_constant(name: str):
    raise MalformedJSON("malformed JSON: NaN and Infinity are not JSON numbers")


def _nested_deeper_than(value, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def storable_text_problem(text: str) -> str:
    """Why PostgreSQL cannot store ``text`` ("" when it can).

    It stores no NUL in text or jsonb, and UTF-8 has no encoding for a lone surrogate (what a JSON
    escape such as ``"\\ud800"`` decodes to).
    """
    if NUL in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired surrogates (not valid Unicode)"
    return ""


def storable(text: str) -> str:
    """``text`` without what the database cannot store: NUL dropped, lone surrogates as U+FFFD."""
    if not storable_text_problem(text):
        return text
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text.replace(NUL, ""))


def unstorable_errors(raw: dict) -> list[FieldError]:
    """Every field whose name or text the database cannot store (see ``storable_text_problem``),
    and every number JSON cannot hold (infinite or NaN: a source's mapping can compute one, as
    ``to_number('1e999')``; ``decode_json`` refuses them in a body).

    Walked with an explicit stack: a deeply nested body must not exhaust Python's recursion; and
    only when its JSON text shows a NUL, a non-finite number or does not encode, which is never for
    nearly every event.
    """
    text = json.dumps(raw, ensure_ascii=False)
    if "\\u0000" not in text and "Infinity" not in text and "NaN" not in text and not storable_text_problem(text):
        return []
    found = []
    stack: list[tuple[tuple[str, ...], Any]] = [((), raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for name, item in value.items():
                child = (*path, printable(str(name)))
                if problem := storable_text_problem(str(name)):
                    found.append(FieldError(".".join(child), f"name {problem}"))
                stack.append((child, item))
        elif isinstance(value, list):
            stack.extend(((*path, str(index)), item) for index, item in enumerate(value))
        elif isinstance(value, str) and (problem := storable_text_problem(value)):
            found.append(FieldError(".".join(path), problem))
        elif isinstance(value, float) and not math.isfinite(value):
            found.append(FieldError(".".join(path), f"is {value}, a number JSON cannot hold"))
    return sorted(found, key=lambda error: error.field)


def printable(name: str) -> str:
    """A field name as an error can carry it: NUL and lone surrogates written as escapes."""
    return name.replace(NUL, "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")
