"""Saving destinations and HTTP actions (``ledger.models.integrations``): the one service the
integrations file and the admin both go through. A row is checked first (every problem, each saying
where: a template or an expression that does not compile, a field the schema does not have, a
secret given instead of the variable that holds it) and refused whole; a saved one is audited and
read again by this process's registry at once (other processes within
``ledger.integrations.configured.Loaded.REFRESH_SECONDS``)."""

import os
import re
from typing import Any

import httpx
import jsonschema
from django.conf import settings

from ledger.actions import egress, registry, secret_names, summaries
from ledger.core.retry import schedule
from ledger.core.transitions import save_audited
from ledger.integrations import configured, schema_patterns, templates
from ledger.integrations.destination_config import DestinationConfig
from ledger.integrations.http_action import BODY_FORMATS, METHODS, NORMALISERS, OUTCOMES, ConfiguredHttpAction
from ledger.models import Destination, HttpAction, OnConflict, Ordering

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,50}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")


class ConfigurationRefused(ValueError):
    """A destination or HTTP action that would not work: ``problems`` says each thing, and where."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def save_destination(destination: Destination, *, actor: str) -> Destination:
    if problems := destination_problems(destination):
        raise ConfigurationRefused(problems)
    save_audited(
        destination,
        actor=actor,
        noun="destination",
        message=f"destination {destination.slug}: {destination.base_url} (auth {destination.auth})",
    )
    configured.loaded.forget()
    return destination


def save_http_action(action: HttpAction, *, actor: str) -> HttpAction:
    if problems := http_action_problems(action):
        raise ConfigurationRefused(problems)
    if action.performed_by == HttpAction.PerformedBy.CALLER:
        does = f"performed by the caller, looked up at {action.destination.slug}{action.lookup.get('path', '')}"
    else:
        does = f"{action.request.get('method', 'POST')} {action.destination.slug}{action.request.get('path', '')}"
    save_audited(action, actor=actor, noun="http_action", message=f"HTTP action {action.name}: {does}")
    configured.loaded.forget()
    return action


def secret_status(destination: Destination) -> str:
    """Whether the credential a destination names is set here (never its value)."""
    if destination.auth == Destination.Auth.NONE:
        return "no credential"
    return f"{destination.secret_env}: {'set' if os.environ.get(destination.secret_env) else 'missing'}"


def destination_problems(destination: Destination) -> list[str]:
    problems = []
    if not isinstance(destination.slug, str) or not SLUG.fullmatch(destination.slug):
        problems.append("slug: letters, digits, - and _, at most 50")
    url = destination.base_url
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", url):
        problems.append("base_url: an http:// or https:// URL without a query")
    elif not _host(url):
        problems.append("base_url: its host is not one a call can reach (an address or a DNS name)")
    elif problem := egress.destination_problem(url):
        problems.append(f"base_url: {problem} (refused by the egress policy, {egress.WHERE})")
    if destination.auth not in Destination.Auth.values:
        problems.append(f"auth: one of {', '.join(Destination.Auth.values)}")
    elif destination.auth != Destination.Auth.NONE and not (
        isinstance(destination.secret_env, str) and ENV_NAME.fullmatch(destination.secret_env)
    ):
        problems.append("secret_env: the name of an environment variable (A-Z, 0-9, _), not the secret itself")
    elif destination.auth != Destination.Auth.NONE and destination.secret_env.startswith(secret_names.PREFIX):
        # A workspace's admins bind its sources to these: a credential among them would be theirs to test.
        problems.append(f"secret_env: {secret_names.PREFIX} names are sources' secrets; name the credential otherwise")
    if destination.auth == Destination.Auth.HEADER and not HEADER_NAME.fullmatch(str(destination.auth_header or "")):
        problems.append("auth_header: the header's name, for auth=header")
    for name in ("idempotency_header",):
        value = getattr(destination, name)
        if value and not HEADER_NAME.fullmatch(str(value)):
            problems.append(f"{name}: a header name, or empty")
    if destination.error_code:
        problems += [f"error_code: {problem}" for problem in templates.expression_problems(destination.error_code)]
    problems += _numbers(
        destination,
        positive=("connect_timeout_seconds", "timeout_seconds", "max_concurrency", "breaker_cooldown_seconds"),
        optional=("idempotency_key_retention_seconds", "rate_limit_per_second", "breaker_threshold"),
    )
    return problems


def _host(url: str) -> str:
    try:
        return httpx.URL(url).host
    except (httpx.InvalidURL, UnicodeError):  # an IPv6 literal that is none, a malformed IDNA label
        return ""


def http_action_problems(action: HttpAction) -> list[str]:
    problems = []
    if not isinstance(action.name, str) or not SLUG.fullmatch(action.name):
        problems.append("name: letters, digits, - and _, at most 50 (events name it as their action)")
    elif action.name in registry.coded:
        problems.append(f"name: {action.name} is an action defined in code")
    if _destination_of(action) is None:
        problems.append("destination: required")
    if not isinstance(action.consequential, bool):
        problems.append("consequential: true or false")
    problems += _schema_problems(action)
    problems += _numbers(
        action,
        positive=(
            "max_attempts",
            "deadline_seconds",
            "payload_retention_days",
            "key_retention_days",
            "claim_lease_seconds",
        ),
        non_negative=("backoff_base_seconds", "backoff_cap_seconds", "settle_after_seconds"),
        optional=("service_level_seconds",),
    )
    if action.ordering not in Ordering.values:
        problems.append(f"ordering: one of {', '.join(Ordering.values)}")
    elif action.ordering != Ordering.INDEPENDENT and not _has_version(action):
        problems.append(
            f"ordering: {action.ordering} orders the versions of one request: it needs an identity field "
            "`version` (an integer, normaliser whole_number)"
        )
    if action.on_conflict not in OnConflict.values:
        problems.append(
            f"on_conflict: one of {', '.join(OnConflict.values)} (what a redelivery with a changed payload "
            f"does before the operation runs), not {action.on_conflict!r}"
        )
    if action.performed_by == HttpAction.PerformedBy.CALLER:
        problems += _caller_problems(action)
    elif action.performed_by == HttpAction.PerformedBy.OPSCONSOLE:
        problems += _request_problems(action.request)
        problems += _response_problems(action.response)
    else:
        problems.append(
            "performed_by: opsconsole (our workers send its request) or caller (its caller claims it "
            f"and acts itself, docs/claims.md), not {action.performed_by!r}"
        )
    problems += _lookup_problems(action)
    problems += _listing_problems(action.listing)
    if not problems:
        try:
            ConfiguredHttpAction(action, DestinationConfig.of(action.destination))
        except (KeyError, TypeError, ValueError, jsonschema.SchemaError) as exc:
            problems.append(f"cannot be built: {exc}")
    return problems


def retry_schedule(action: HttpAction) -> str:
    """The delays the retry policy gives, for people ("2 s, 4 s, 8 s, 16 s")."""
    return schedule(action.max_attempts, action.backoff_base_seconds, action.backoff_cap_seconds)


def _schema_problems(action: HttpAction) -> list[str]:
    schema = action.schema
    if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        return ["schema: a JSON Schema of type object, with properties"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(part) for part in exc.absolute_path)
        return [f"schema{'.' + where if where else ''}: {exc.message}"]
    properties = set(schema["properties"])
    problems = schema_patterns.problems(schema)
    for name in ("identity_fields", "fingerprint_fields", "sensitive_fields"):
        value = getattr(action, name)
        if not isinstance(value, list) or not all(isinstance(field, str) for field in value):
            problems.append(f"{name}: a list of field names")
            continue
        problems += [f"{name}: {field} is not a field of the schema" for field in value if field not in properties]
    if isinstance(action.identity_fields, list) and not action.identity_fields:
        problems.append("identity_fields: at least one field (what makes two events the same business action)")
    if not isinstance(action.normalisers, dict):
        problems.append("normalisers: a mapping of identity field to normaliser")
    else:
        known = ", ".join(NORMALISERS)
        problems += [
            f"normalisers.{field}: one of {known}"
            for field, name in action.normalisers.items()
            if name not in NORMALISERS
        ]
        if isinstance(action.identity_fields, list):
            problems += [
                f"normalisers.{field}: required for the identity field (one of {known})"
                for field in action.identity_fields
                if field not in action.normalisers
            ]
    money = action.money_fields
    if not isinstance(money, dict) or not all(
        amount in properties and currency in properties for amount, currency in money.items()
    ):
        problems.append("money_fields: amount field: currency field, both fields of the schema")
    if action.summary and isinstance(action.sensitive_fields, list):
        problems += [
            f"summary: {problem}"
            for problem in summaries.problems(
                action.summary, fields=sorted(properties), sensitive=action.sensitive_fields
            )
        ]
    return problems


def _request_problems(request: Any) -> list[str]:
    if not isinstance(request, dict):
        return ["request: a mapping with method, path and body"]
    problems = [
        f"request.{name}: unknown"
        for name in request
        if name not in ("method", "path", "headers", "body", "body_format")
    ]
    if str(request.get("method", "POST")).upper() not in METHODS:
        problems.append(f"request.method: one of {', '.join(METHODS)}")
    if not isinstance(request.get("path"), str) or not request["path"].startswith("/"):
        problems.append("request.path: a path starting with /, e.g. /v1/charges")
    if request.get("body_format", "json") not in BODY_FORMATS:
        problems.append(f"request.body_format: one of {', '.join(BODY_FORMATS)}")
    headers = request.get("headers", {})
    if not isinstance(headers, dict) or not all(HEADER_NAME.fullmatch(str(name)) for name in headers):
        problems.append("request.headers: a mapping of header name to template")
    return problems + templates.problems(request, "request")


def _caller_problems(action: HttpAction) -> list[str]:
    """What a caller action (``performed_by: caller``) gets wrong: it sends nothing itself, so it
    has no request to send nor answer to read, and it must say how its destination is asked."""
    problems = []
    if action.request:
        problems.append(
            "request: a caller action declares no request: its caller claims each operation and acts "
            "itself (docs/claims.md); say how the destination finds a record by our key in lookup"
        )
    if action.response:
        problems.append("response: a caller action sends no request, so there is no answer to read")
    lookup = action.lookup if isinstance(action.lookup, dict) else {}
    if lookup.get("repeat"):
        problems.append("lookup.repeat: opsconsole never sends a caller action's request; look it up with lookup.path")
    if "path" not in lookup:
        problems.append(
            "lookup.path: required for a caller action: a GET by our key (e.g. "
            "/invoices?idempotency_key={{ key }}) that reconciliation asks when a claim's outcome is unknown"
        )
    low, high = settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN, settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX
    lease = action.claim_lease_seconds
    if isinstance(lease, int) and not isinstance(lease, bool) and not low <= lease <= high:
        problems.append(f"claim_lease_seconds: a whole number of seconds from {low} to {high}")
    return problems


def _response_problems(response: Any) -> list[str]:
    if not isinstance(response, dict):
        return ["response: a mapping"]
    problems = [f"response.{name}: unknown" for name in response if name not in ("record_id", "message", "outcomes")]
    for name in ("record_id", "message"):
        if name in response:
            problems += [f"response.{name}: {problem}" for problem in templates.expression_problems(response[name])]
    rules = response.get("outcomes", [])
    if not isinstance(rules, list):
        return [*problems, "response.outcomes: a list of {when, outcome}"]
    for index, rule in enumerate(rules):
        where = f"response.outcomes[{index}]"
        if not isinstance(rule, dict):
            problems.append(f"{where}: a mapping with when and outcome")
            continue
        problems += [f"{where}.when: {problem}" for problem in templates.expression_problems(rule.get("when"))]
        if rule.get("outcome") not in OUTCOMES:
            problems.append(f"{where}.outcome: one of {', '.join(OUTCOMES)}")
    return problems


def _lookup_problems(action: HttpAction) -> list[str]:
    lookup = action.lookup
    if not isinstance(lookup, dict):
        return ["lookup: a mapping"]
    known = ("repeat", "path", "found", "record_id", "reference", "absent_on_404")
    problems = [f"lookup.{name}: unknown" for name in lookup if name not in known]
    problems += [
        f"lookup.{name}: true or false"
        for name in ("repeat", "absent_on_404")
        if not isinstance(lookup.get(name, False), bool)
    ]
    destination = _destination_of(action)
    if lookup.get("repeat") and destination is not None and not destination.idempotency_header:
        problems.append("lookup.repeat: the destination honours no idempotency header, so a repeat would act again")
    if "path" in lookup:
        if not isinstance(lookup["path"], str) or not lookup["path"].startswith("/"):
            problems.append("lookup.path: a path starting with /, e.g. /tickets?source_key={{ key }}")
        else:
            problems += templates.problems(lookup["path"], "lookup.path")
    for name in ("found", "record_id", "reference"):
        if name in lookup:
            problems += [f"lookup.{name}: {problem}" for problem in templates.expression_problems(lookup[name])]
    return problems


def _listing_problems(listing: Any) -> list[str]:
    if not isinstance(listing, dict):
        return ["listing: a mapping"]
    if not listing:
        return []
    known: tuple[str, ...] = (
        "path",
        "records",
        "record_id",
        "reference",
        "created_at",
        "fields",
        "page_param",
        "page_size",
    )
    known += ("cursor_param", "next_cursor", "page_size_param")
    problems = [f"listing.{name}: unknown" for name in listing if name not in known]
    if not isinstance(listing.get("path"), str) or not listing["path"].startswith("/"):
        problems.append("listing.path: a path starting with /")
    else:
        problems += templates.problems(listing["path"], "listing.path")
    if "reference" not in listing:
        problems.append("listing.reference: required (where a record carries our key)")
    for name in ("records", "record_id", "reference", "created_at", "next_cursor"):
        if name in listing:
            problems += [f"listing.{name}: {problem}" for problem in templates.expression_problems(listing[name])]
    fields = listing.get("fields", {})
    if not isinstance(fields, dict):
        problems.append("listing.fields: a mapping of data field to expression")
    else:
        for name, expression in fields.items():
            problems += [f"listing.fields.{name}: {problem}" for problem in templates.expression_problems(expression)]
    if "page_param" in listing and "cursor_param" in listing:
        problems.append("listing: pages by number (page_param) or by cursor (cursor_param), not both")
    if ("cursor_param" in listing) != ("next_cursor" in listing):
        problems.append(
            "listing: cursor_param and next_cursor go together (where the next cursor is, what it is sent as)"
        )
    size = listing.get("page_size", 100)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        problems.append("listing.page_size: a whole number, at least 1")
    return problems


def _has_version(action: HttpAction) -> bool:
    properties = action.schema.get("properties", {}) if isinstance(action.schema, dict) else {}
    return (
        isinstance(action.identity_fields, list)
        and "version" in action.identity_fields
        and isinstance(properties.get("version"), dict)
        and properties["version"].get("type") == "integer"
        and isinstance(action.normalisers, dict)
        and action.normalisers.get("version") == "whole_number"
    )


def _destination_of(action: HttpAction) -> Destination | None:
    try:
        return action.destination
    except HttpAction.destination.RelatedObjectDoesNotExist:
        return None


def _numbers(row, *, positive=(), non_negative=(), optional=()) -> list[str]:
    problems = []
    for name in (*positive, *non_negative, *optional):
        value = getattr(row, name)
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{name}: a number")
        elif value < 0 or (value == 0 and name not in non_negative):
            problems.append(f"{name}: {'at least 0' if name in non_negative else 'more than 0'}")
    return problems
