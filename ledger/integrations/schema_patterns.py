"""A configured action's JSON Schema with its patterns matched by RE2 (google-re2), a linear-time
engine. jsonschema's own keywords match with Python's ``re``, which backtracks: ``^(a+)+$`` takes
seconds at 25 characters, doubling per character, and any token may send the text. ``Validator`` is
draft 2020-12 with the three keywords that match patterns (``pattern``, ``patternProperties``, and
``additionalProperties``, which skips the names a pattern matches) on RE2; the other keywords and
the ``format`` checks are jsonschema's.

RE2 has no backreferences and no lookaround, so a pattern that holds one is refused when saved
(``problems``), saying where. A schema that holds both ``patternProperties`` and
``unevaluatedProperties`` is refused too: jsonschema would match those patterns with ``re``.
"""

from functools import lru_cache
from typing import Any

import re2  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, SchemaError, ValidationError, validators
from jsonschema._utils import extras_msg

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
