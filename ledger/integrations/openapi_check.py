"""An integrations file checked against its vendors' own OpenAPI documents before it is applied
(``manage.py integrations apply FILE --check-openapi [DESTINATION=]vendor.yaml``). A request the
vendor does not take is then refused at apply time, rather than failing at run time as "needs review".

Each document describes one destination: every HTTP action of the file that calls it is checked
against it (a document given without a destination is the file's one destination that HTTP actions
call). ``openapi-core`` reads the document (``openapi-spec-validator`` checks it first: a bad one is
refused saying what is wrong, and where), finds the operation of each request and validates its body
with the schema of the operation's content type; this module only builds the requests and words
the differences:

- **The request.** Its templates are rendered with a sample built from the action's own data
  schema (``sample``: each property's ``const``, ``enum``, ``default`` or ``examples`` value, else a
  value of its type and format within its bounds), so ``{{ data.amount }}`` is a number where the
  schema says integer and the vendor's types are compared with what a real event would send. A
  field the schema lacks renders as null.
- **Method and path.** The rendered path (its query apart) is matched against the document's path
  templates. The document's ``servers`` are compared by their path only, with the path of the
  destination's ``base_url``: a destination may be the vendor's sandbox or a mock on another host,
  but ``/v1`` against ``/api`` is a request to the wrong place.
- **The body** (``openapi_body``), as it goes out: JSON as sent; a form body (``body_format: form``) as the vendor
  reads one, its values as text cast to the schema's types (as openapi-core reads a form), nested
  values being the bracket convention's nested objects. Every schema error is named by its field.
  A field the operation's schema does not declare is named even where the schema allows other
  fields: a vendor may drop such a field without a word, which is how a misspelt one fails.
- **Its lookup and listing**: the GET path exists, and each query parameter the path sends is one
  the operation declares (a vendor ignores another, and a lookup by a filter it ignores lists every
  record).

Problems are collected across the whole file, so one run names them all.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from itertools import islice
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml
from jsonschema_path import SchemaPath
from openapi_core import OpenAPI
from openapi_core.configurations import Config
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound, ServerNotFound
from openapi_core.templating.paths.finders import APICallPathFinder
from openapi_spec_validator.shortcuts import SPEC2VALIDATOR
from openapi_spec_validator.versions.consts import OPENAPIV2
from openapi_spec_validator.versions.exceptions import OpenAPIVersionNotFound
from openapi_spec_validator.versions.shortcuts import get_spec_version
from referencing.exceptions import Unresolvable

from ledger.integrations import file, openapi_body, templates
from ledger.integrations.openapi_sample import sample
from ledger.models import HttpAction

# The origin every request is matched under: hosts are not compared, only paths (see above).
ORIGIN = "http://destination.invalid"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
MAX_DOCUMENT_PROBLEMS = 20
# A listing's window, as ``ConfiguredHttpAction.list_records`` renders it.
LISTING_WINDOW = {
    "created_after": "2026-01-01T00:00:00+00:00",
    "created_before": "2026-01-02T00:00:00+00:00",
    "created_after_epoch": 1767225600,
    "created_before_epoch": 1767312000,
}


@dataclass(frozen=True)
class VendorDocument:
    """A vendor's OpenAPI document, read and checked; ``name`` is how problems cite it."""

    name: str
    openapi: OpenAPI


def load(text: str, *, name: str) -> VendorDocument:
    """The OpenAPI 3 document ``text`` holds (YAML or JSON); IntegrationsError saying what is wrong
    with it, and where, when it is none."""
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise file.IntegrationsError([f"{name}: not YAML or JSON: {_one_line(str(exc))}"]) from None
    if not isinstance(data, dict):
        raise file.IntegrationsError([f"{name}: not an OpenAPI document (it holds no mapping)"])
    try:
        version = get_spec_version(data)
    except OpenAPIVersionNotFound:
        raise file.IntegrationsError([f"{name}: not an OpenAPI document (no `openapi: 3.x` field)"]) from None
    if version == OPENAPIV2:
        raise file.IntegrationsError([f"{name}: a Swagger 2.0 document, which is not read: convert it to OpenAPI 3"])
    validator_cls = SPEC2VALIDATOR[version]
    # Checked as written; matched with its servers reduced to their paths.
    try:
        errors = list(islice(validator_cls(_schema_path(data)).iter_errors(), MAX_DOCUMENT_PROBLEMS))
    except Unresolvable as exc:
        raise file.IntegrationsError([f"{name}: {_unresolvable(exc)}"]) from None
    if errors:
        raise file.IntegrationsError(
            [
                f"{name}: not a valid OpenAPI document: {_where(error.absolute_path)}{_one_line(error.message)}"
                for error in errors
            ]
        )
    return VendorDocument(name, OpenAPI(_schema_path(_servers_as_paths(data)), config=Config(spec_validator_cls=None)))


def _schema_path(data: dict) -> SchemaPath:
    # No handlers: a $ref outside the document is not fetched (from the network, or a file), it is named.
    return SchemaPath.from_dict(data, handlers={})


def _unresolvable(exc: Unresolvable) -> str:
    return (
        f"the reference {exc.ref} leads nowhere in the document (a reference to another file or a URL is not followed)"
    )


def check(planned: list[file.Planned], vendors: Mapping[str | None, VendorDocument]) -> None:
    """Check an integrations file's plan (``file.plan``; ``file.apply``'s ``check``) against ``vendors``
    (destination slug, or None for the file's one destination, to its document); IntegrationsError
    listing every difference."""
    actions = [item.row for item in planned if isinstance(item.row, HttpAction)]
    called = sorted({action.destination.slug for action in actions})
    problems = []
    by_destination: dict[str, VendorDocument] = {}
    for slug, vendor in vendors.items():
        if slug is None and len(called) != 1:
            problems.append(
                f"{vendor.name}: name the destination it describes (DESTINATION={vendor.name}): the file's "
                f"HTTP actions call {', '.join(called) or 'no destination'}"
            )
        elif slug is not None and slug not in called:
            problems.append(f"{vendor.name}: no HTTP action of the file calls destination {slug}")
        else:
            by_destination[slug or called[0]] = vendor
    for index, action in enumerate(actions):
        described = by_destination.get(action.destination.slug)
        if described is None:
            continue
        try:
            found = action_problems(action, described)
        except Unresolvable as exc:
            found = [f"{described.name}: {_unresolvable(exc)}"]
        problems += [f"http_actions[{index}] {action.name}: {problem}" for problem in found]
    if problems:
        raise file.IntegrationsError(problems)


def action_problems(action: HttpAction, vendor: VendorDocument) -> list[str]:
    """How ``action``'s request, lookup and listing differ from what ``vendor`` describes (a caller
    action has no request: its caller sends it)."""
    context = {"data": sample(action.schema), "key": f"{action.name}:sample-key"}
    base_path = urlsplit(action.destination.base_url).path
    request = action.request
    method = request.get("method", "POST").upper()
    operation: _Operation | None = None
    problems: list[str] = []
    if action.performed_by != HttpAction.PerformedBy.CALLER:
        path = templates.render_path(request["path"], context)
        operation, problems = _operation(vendor, method, path, base_path)
    if operation is not None:
        problems += _query_problems(operation, path)
        fmt = request.get("body_format", "json")
        body = templates.render(request["body"], context) if "body" in request else None
        problems += openapi_body.problems(
            vendor.openapi, operation.operation, f"{method} {operation.pattern}", body, fmt
        )
    for part, config, ctx in (
        ("lookup", action.lookup or {}, context),
        ("listing", action.listing or {}, LISTING_WINDOW),
    ):
        if "path" in config:
            path = templates.render_path(config["path"], ctx)
            found, found_problems = _operation(vendor, "GET", path, base_path)
            problems += [f"{part}: {problem}" for problem in found_problems]
            if found is not None:
                problems += [f"{part}: {problem}" for problem in _query_problems(found, path)]
    return problems


@dataclass(frozen=True)
class _Operation:
    method: str
    pattern: str  # the document's path template, e.g. /tickets/{id}
    path: SchemaPath
    operation: SchemaPath


def _operation(vendor: VendorDocument, method: str, rendered: str, base_path: str) -> tuple[_Operation | None, list]:
    path = urlsplit(rendered).path
    url = ORIGIN + base_path.rstrip("/") + "/" + path.lstrip("/")
    finder = APICallPathFinder(vendor.openapi.spec, base_url=ORIGIN)
    try:
        found = finder.find(method.lower(), url)
    except PathNotFound:
        nearest = get_close_matches(path, _paths(vendor), n=1)
        hint = f" (nearest: {nearest[0]})" if nearest else ""
        return None, [f"{method} {path}: {vendor.name} describes no such path{hint}"]
    except OperationNotFound:
        methods = [other.upper() for other in METHODS if _finds(finder, other, url)]
        return None, [f"{method} {path}: {vendor.name} has no {method} on this path (it has {', '.join(methods)})"]
    except ServerNotFound:
        servers = sorted(
            {server["url"] for server in openapi_body.contents(vendor.openapi.spec).get("servers", [])} or {"/"}
        )
        return None, [
            f"{method} {path}: the destination's base_url has the path {base_path or '/'}, "
            f"but {vendor.name} serves {path} under {', '.join(servers)}"
        ]
    return _Operation(method, found.path_result.pattern, found.path, found.operation), []


def _finds(finder: APICallPathFinder, method: str, url: str) -> bool:
    try:
        finder.find(method, url)
    except OperationNotFound:
        return False
    except ServerNotFound:
        pass  # the operation is there, under other servers
    return True


def _query_problems(found: _Operation, rendered: str) -> list[str]:
    declared = {
        openapi_body.contents(parameter).get("name")
        for item in (found.path, found.operation)
        if "parameters" in item
        for parameter in item / "parameters"
        if openapi_body.contents(parameter).get("in") == "query"
    }
    sent = [name for name, _ in parse_qsl(urlsplit(rendered).query, keep_blank_values=True)]
    return [
        f'query parameter "{name}" is not a parameter of {found.method} {found.pattern}'
        for name in dict.fromkeys(sent)
        if name not in declared and re.sub(r"\[.*", "", name) not in declared
    ]


def _servers_as_paths(data: dict) -> dict:
    """``data`` with each server URL reduced to its path (hosts are not compared), copied only where
    it changes (a vendor's whole API may be megabytes)."""
    copy = _reduced(data)
    if isinstance(data.get("paths"), dict):
        copy["paths"] = {}
        for pattern, item in data["paths"].items():
            if isinstance(item, dict):
                item = _reduced(item) | {m: _reduced(item[m]) for m in METHODS if isinstance(item.get(m), dict)}
            copy["paths"][pattern] = item
    return copy


def _reduced(holder: dict) -> dict:
    servers = holder.get("servers")
    if not isinstance(servers, list):
        return dict(holder)
    return holder | {
        "servers": [server | {"url": _server_path(server)} for server in servers if isinstance(server, dict)]
    }


def _server_path(server: dict) -> str:
    return urlsplit(str(server.get("url", "/"))).path.rstrip("/") or "/"


def _paths(vendor: VendorDocument) -> list[str]:
    return list((vendor.openapi.spec / "paths").str_keys())


def _where(path: Any) -> str:
    parts = [str(part) for part in path]
    return f"{'.'.join(parts)}: " if parts else ""


def _one_line(text: str, limit: int = 300) -> str:
    """The first paragraph of a library's message, on one line and bounded (the spec validator's
    go on with the whole schema they failed)."""
    text = " ".join(text.split("\n\n")[0].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
