"""A sample of the data an HTTP action's JSON Schema describes, to render its request templates with
when no event is at hand (``ledger.integrations.openapi_check``): each value the schema names
(``const``, the first of ``enum``, ``default``, the first of ``examples``), else one of its type and
format within its bounds. It types the templates' values as an event would; it is not meant to pass
every constraint (a ``pattern`` is not followed)."""

from typing import Any

# A value for each string format a schema may name; any other string is "sample".
FORMATS = {
    "email": "sample@example.com",
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "uri": "https://example.com/sample",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}
MAX_DEPTH = 8


def sample(schema: Any, depth: int = 0) -> Any:
    """A value of ``schema``'s type (an object's every property, nested ones too)."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    for named in ("const", "default"):
        if named in schema:
            return schema[named]
    for listed in ("enum", "examples"):
        if isinstance(schema.get(listed), list) and schema[listed]:
            return schema[listed][0]
    for combinator in ("allOf", "anyOf", "oneOf"):
        branches = [branch for branch in schema.get(combinator) or [] if isinstance(branch, dict)]
        if branches:
            return sample({**schema, combinator: None, **branches[0]}, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((name for name in kind if name != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: sample(inner, depth + 1) for name, inner in properties.items()}
    if kind == "array":
        return [sample(schema.get("items", {}), depth + 1)] * max(1, int(schema.get("minItems", 1)))
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "boolean":
        return True
    if kind == "string":
        return _text(schema)
    return None


def _number(schema: dict, kind: str) -> int | float:
    if "minimum" in schema:
        value = schema["minimum"]
    elif "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
        value = schema["exclusiveMinimum"] + 1
    else:
        value = 1
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    return int(value) if kind == "integer" else value


def _text(schema: dict) -> str:
    text = FORMATS.get(schema.get("format", ""), "sample")
    minimum, maximum = schema.get("minLength", 0), schema.get("maxLength")
    text = text.ljust(minimum, "x") if isinstance(minimum, int) else text
    return text[:maximum] if isinstance(maximum, int) else text
