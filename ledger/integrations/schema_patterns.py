"""A configured action's JSON Schema with its patterns matched by RE2 (google-re2), a linear-time
engine. jsonschema's own keywords match with Python's ``re``, which backtracks: ``^(a+)+$`` takes
seconds at 25 characters, doubling per character, and any token may send the text. ``Validator`` is
draft 2020-12 with the three keywords that match patterns (``pattern``, ``patternProperties``, and
``additionalProperties``, which skips the names a pattern matches) on RE2; the other keywords and
the ``format`` checks are jsonschema's.

RE2 has no backreferences and no lookaround, so a pattern that holds one is refused when saved
(``problems``), saying where. A schema that holds both ``patternProperties`` and
``unevaluatedProperties`` is refused too: jsonschema would match those patterns with ``re``.

``quick_check``: the valid case first, in Rust (jsonschema-rs), for a schema of the keywords the two
libraries are held to agree on (``QUICK_KEYWORDS``, tests/ledger/integrations/test_quick_check.py),
its ``pattern``s still on RE2 and its ``format``s on jsonschema's checker (each a keyword of our
own in the Rust validator). It answers only "valid"; anything else, and any schema of other
keywords, is ``Validator``'s to judge and word: the errors are always jsonschema's.
"""

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import jsonschema_rs
import re2  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, FormatChecker, SchemaError, ValidationError, validators
from jsonschema._utils import extras_msg

# The ``format`` checks of a configured action's schema, in ``Validator`` and in ``quick_check`` alike.
FORMATS = FormatChecker()
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported by ``problems``, not logged by RE2
# Values that are data, not schemas: a "pattern" inside them is no pattern.
_DATA_KEYWORDS = {"const", "enum", "default", "examples"}


@lru_cache(maxsize=1024)
def compiled(pattern: str):
    return re2.compile(pattern, _OPTIONS)


def _matches(pattern: str, text: str) -> bool:
    try:
        return compiled(pattern).search(text) is not None
    except re2.error:
        # Saving refuses such a pattern (``problems``); a row written otherwise is never built.
        raise SchemaError(f"RE2 cannot compile the pattern {pattern!r}") from None


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _matches(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [
        name for name in instance if name not in properties and not any(_matches(pattern, name) for pattern in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(extra) for extra in sorted(extras))
            listed = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            names, verb = extras_msg(sorted(extras))
            yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


Validator = validators.extend(
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def problems(schema: Any) -> list[str]:
    """Each pattern of ``schema`` (already a valid schema) that RE2 cannot run, saying where."""
    found, keywords = [], set()
    for where, name, value in _keywords(schema, "schema"):
        keywords.add(name)
        if name == "pattern" and isinstance(value, str):
            found += _pattern_problem(value, f"{where}.pattern")
        elif name == "patternProperties" and isinstance(value, dict):
            found += [
                problem for pattern in value for problem in _pattern_problem(pattern, f"{where}.{name}.{pattern}")
            ]
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        found.append("schema: unevaluatedProperties cannot be used with patternProperties (use additionalProperties)")
    return found


def _keywords(schema: Any, where: str):
    """Every (where, keyword, value) of ``schema`` and its subschemas (not of the data it holds)."""
    if isinstance(schema, dict):
        for name, value in schema.items():
            yield where, name, value
            if name not in _DATA_KEYWORDS:
                yield from _keywords(value, f"{where}.{name}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _keywords(value, f"{where}[{index}]")


def _pattern_problem(pattern: str, where: str) -> list[str]:
    try:
        compiled(pattern)
    except re2.error as exc:
        said = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return [
            f"{where}: RE2 cannot compile {pattern!r} ({said}); patterns run on RE2, in linear time, "
            "which has no backreferences and no lookaround"
        ]
    return []


# --- the valid case in Rust ---------------------------------------------------------------------------

# The keywords ``quick_check`` takes, by what their value is: a map of subschemas, a list of them, one
# subschema, or a plain value. Draft 2020-12 as ``Validator`` reads them, whatever ``$schema`` says
# (so ``$schema`` itself, ``$ref`` and ``$defs`` are not among them); ``patternProperties`` neither,
# as it would run on Rust's regex engine.
_SUBSCHEMA_MAPS = {"properties"}
_SUBSCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
_SUBSCHEMAS = {"items", "not", "additionalProperties"}
_PLAIN = {
    "type", "required", "enum", "const", "pattern", "format",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minItems", "maxItems", "minProperties", "maxProperties",
    "title", "description", "default", "examples", "$comment",
}  # fmt: skip
QUICK_KEYWORDS = _SUBSCHEMA_MAPS | _SUBSCHEMA_LISTS | _SUBSCHEMAS | _PLAIN
# Their numbers are compared with the data's: jsonschema-rs takes a float as the shortest decimal it
# prints as (1e23 is 10**23 to it), jsonschema as its binary value (99999999999999991611392), so an
# integer and a float of 2**53 or more can compare otherwise (tests/ledger/integrations/test_quick_check.py).
_COMPARED = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "const", "enum"}
_EXACT = 2**53


def quick_check(schema: Any) -> Callable[[Any], bool] | None:
    """A check that answers True only for data ``Validator`` (with ``FORMATS``) finds valid, ~7x
    sooner; False says nothing (ask ``Validator``). None for a schema with a keyword outside
    ``QUICK_KEYWORDS``, a number of 2**53 or more in a bound, ``const`` or ``enum``, or one
    jsonschema-rs cannot build."""
    if not _of_quick_keywords(schema):
        return None
    try:
        validator = jsonschema_rs.Draft202012Validator(
            schema, keywords={"pattern": _RE2Pattern, "format": _CheckedFormat}, validate_formats=False
        )
    except BaseException as exc:  # noqa: BLE001  a schema it reads otherwise: Validator alone judges it
        _unless_a_panic(exc)
        return None

    def check(data: Any) -> bool:
        try:
            return validator.is_valid(data)
        except BaseException as exc:  # noqa: BLE001  data it cannot take (a lone surrogate): Validator's
            _unless_a_panic(exc)
            return False

    return check


def _unless_a_panic(exc: BaseException) -> None:
    """Raise ``exc`` again unless it is an ``Exception`` or a panic of the Rust code (pyo3's
    ``PanicException``, a ``BaseException``): either leaves the judgement to ``Validator``, where
    an interrupt or an exit must go on."""
    if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
        raise exc


def _of_quick_keywords(schema: Any) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for name, value in schema.items():
        if name in _SUBSCHEMA_MAPS:
            fits = isinstance(value, dict) and all(map(_of_quick_keywords, value.values()))
        elif name in _SUBSCHEMA_LISTS:
            fits = isinstance(value, list) and all(map(_of_quick_keywords, value))
        elif name in _SUBSCHEMAS:
            fits = _of_quick_keywords(value)
        elif name in _COMPARED:
            fits = _exact_as_double(value)
        else:
            fits = name in _PLAIN
        if not fits:
            return False
    return True


def _exact_as_double(value: Any) -> bool:
    """Whether every number in ``value`` (a bound, or a ``const``'s or ``enum``'s JSON) is below
    2**53 in magnitude, where an integer and a double hold the same values."""
    if isinstance(value, dict):
        return all(map(_exact_as_double, value.values()))
    if isinstance(value, list):
        return all(map(_exact_as_double, value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return abs(value) < _EXACT
    return True


class _RE2Pattern:
    """``pattern`` as ``Validator`` matches it, on RE2 (jsonschema-rs would use Rust's engine, whose
    classes read Unicode otherwise)."""

    def __init__(self, parent_schema: dict, value: str, schema_path: list) -> None:
        self.pattern = compiled(value)

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and self.pattern.search(instance) is None:
            raise ValueError("no match")


class _CheckedFormat:
    """``format`` as ``Validator`` checks it, by jsonschema's ``FormatChecker``."""

    def __init__(self, parent_schema: dict, value: str, schema_path: list) -> None:
        self.format = value

    def validate(self, instance: Any) -> None:
        if not FORMATS.conforms(instance, self.format):
            raise ValueError("not of its format")
