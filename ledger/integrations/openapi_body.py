"""A request body as an HTTP action renders it, against the schema of the vendor's operation for its
content type (``ledger.integrations.openapi_check``): every schema error named by its field, and
every field the schema does not declare, even where it allows other fields. A form body is read as
the vendor reads one: its values as text, cast to the schema's types by openapi-core."""

import json
import re
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from jsonschema_path import SchemaPath
from openapi_core import OpenAPI
from openapi_core.casting.schemas.exceptions import CastError
from openapi_core.templating.media_types.exceptions import MediaTypeNotFound
from openapi_core.templating.media_types.finders import MediaTypeFinder

from ledger.actions import expressions

CONTENT_TYPES = {"json": "application/json", "form": "application/x-www-form-urlencoded"}


def problems(openapi: OpenAPI, operation: SchemaPath, name: str, body: Any, fmt: str) -> list[str]:
    """How ``body`` (rendered; ``fmt`` json or form) differs from what ``operation`` (called ``name``,
    e.g. ``POST /tickets``) of ``openapi`` takes."""
    if body is None:
        required = "requestBody" in operation and contents(operation / "requestBody").get("required", False)
        return [f"{name} requires a request body, and the request has none"] if required else []
    if "requestBody" not in operation:
        return [f"{name} takes no request body"]
    content = operation / "requestBody" / "content"
    try:
        media = MediaTypeFinder(content).find(CONTENT_TYPES[fmt])
    except MediaTypeNotFound:
        return [f"{name} takes {', '.join(content.str_keys())}, not a {fmt} body ({CONTENT_TYPES[fmt]})"]
    if "schema" not in media.media_type:
        return []
    schema = media.media_type / "schema"
    # openapi-core's request validator of the document's version: its casters and schema validators are that version's.
    validator_cls: Any = openapi.request_validator_cls
    spec = openapi.spec
    if fmt == "form":
        try:
            value = validator_cls.schema_casters_factory.create(spec, schema).cast(_as_form(body))
        except CastError as exc:
            return [f"request body value {expressions.as_text(exc.value)!r} is not of type {exc.type} in {name}"]
    else:
        value = json.loads(json.dumps(body))
    undeclared = list(_undeclared(value, schema, ()))
    forbidding = {parent for parent, _, forbidden in undeclared if forbidden}
    problems = [
        f'request body field "{_dotted((*parent, field))}" is not in {name} (additionalProperties false)'
        if forbidden
        else f'request body field "{_dotted((*parent, field))}" is not declared by {name} (its schema allows '
        "undeclared fields, which the vendor may drop without a word)"
        for parent, field, forbidden in undeclared
    ]
    validator = validator_cls.schema_validators_factory.create(spec, schema).validator
    for error in sorted(validator.iter_errors(value), key=lambda error: list(map(str, error.absolute_path))):
        if error.validator in ("additionalProperties", "unevaluatedProperties") and (
            tuple(error.absolute_path) in forbidding
        ):
            continue  # named above, by its field
        where = _dotted(tuple(error.absolute_path))
        problems.append(f"request body{f' field {chr(34)}{where}{chr(34)}' if where else ''}: {error.message} ({name})")
    return problems


def _undeclared(value: Any, schema: SchemaPath, where: tuple) -> Iterator[tuple[tuple, str, bool]]:
    """(parent path, field, forbidden) for each field of ``value`` its schema does not declare, at
    any depth. An object whose schema declares no properties (free form, or a map whose values have
    a schema) has nothing to compare its fields with: only its values are followed."""
    if isinstance(value, list):
        if "items" in schema:
            for index, item in enumerate(value):
                yield from _undeclared(item, schema / "items", (*where, index))
        return
    if not isinstance(value, dict):
        return
    declared = _declared(schema)
    extra = contents(schema / "additionalProperties") if "additionalProperties" in schema else True
    patterns = list((schema / "patternProperties").str_keys()) if "patternProperties" in schema else []
    for field, inner in value.items():
        if field in declared:
            yield from _undeclared(inner, declared[field], (*where, field))
        elif any(_matches(pattern, field) for pattern in patterns):
            continue
        elif isinstance(extra, dict) and extra:
            yield from _undeclared(inner, schema / "additionalProperties", (*where, field))
        elif declared:
            yield where, field, extra is False


def _declared(schema: SchemaPath) -> dict[str, SchemaPath]:
    """The properties ``schema`` declares, its own and those of its allOf, anyOf and oneOf branches."""
    declared: dict[str, SchemaPath] = {}
    if "properties" in schema:
        declared |= dict((schema / "properties").str_items())
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in schema:
            for branch in schema / combinator:
                declared = _declared(branch) | declared
    return declared


def _as_form(value: Any) -> Any:
    """A body as the vendor reads it from a form: the nesting kept, every value text, nulls left out
    (``http_action.form_fields``)."""
    if isinstance(value, dict):
        return {name: _as_form(inner) for name, inner in value.items() if inner is not None}
    if isinstance(value, list):
        return [_as_form(inner) for inner in value if inner is not None]
    return expressions.as_text(value)


def contents(path: SchemaPath) -> Any:
    with path.resolve() as resolved:
        return resolved.contents


def _matches(pattern: str, field: str) -> bool:
    with suppress(re.error):
        return re.search(pattern, field) is not None
    return True  # a pattern Python cannot read: the field may match it


def _dotted(parts: tuple) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
