"""One configured HTTP action (an ``HttpAction`` row and its destination) as an action definition:
its data checked by its JSON Schema, its request rendered from templates and sent, the answer read
by its outcome rules, an operation whose answer was lost looked up, and the destination's records
listed for the reconciliation audit. ``ledger.integrations.configured`` loads the rows into the registry.
"""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jsonschema
from django.utils import timezone

from ledger import keys
from ledger.actions import answers, expressions, http
from ledger.actions.base import CALLER, ActionDefinition, FieldError, Limits
from ledger.integrations import schema_patterns, templates
from ledger.integrations.destination_config import LIMITS, DestinationConfig
from ledger.models import HttpAction
from ledger.outcomes import (
    Absent,
    AmbiguousError,
    CannotTell,
    Found,
    OutcomeError,
    PermanentError,
    Success,
    TransientError,
)

# The normalisers an identity field may name (``ledger.keys``).
NORMALISERS: dict[str, Callable[[Any], Any]] = {
    "identifier": keys.identifier,
    "whole_number": keys.whole_number,
    "email_address": keys.email_address,
}
OUTCOMES = ("success", "transient", "permanent", "ambiguous")
BODY_FORMATS = ("json", "form")
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
LISTING_PAGE_LIMIT = 1000


class ConfiguredHttpAction(ActionDefinition):
    """One ``HttpAction`` row as an action definition. Performed by its caller (``performed_by:
    caller``), it has no request: the caller claims each operation and acts itself
    (``ledger.callers``), and the destination is only asked, by ``lookup`` and ``listing``."""

    external = True

    def __init__(self, row: HttpAction, destination: DestinationConfig):
        self.name = row.name
        self.destination = destination
        self.json_schema = row.schema
        # Its patterns on RE2, in linear time: any token may send the text they match.
        if refused := schema_patterns.problems(row.schema):
            raise jsonschema.SchemaError("; ".join(refused))
        self.validator = schema_patterns.Validator(row.schema, format_checker=schema_patterns.FORMATS)
        self.quick_check = schema_patterns.quick_check(row.schema)
        self.identity_fields = tuple(row.identity_fields)
        self.normalisers = {field: NORMALISERS[name] for field, name in row.normalisers.items()}
        self.fingerprint_fields = tuple(row.fingerprint_fields)
        self.consequential = row.consequential
        self.sensitive_fields = tuple(row.sensitive_fields)
        self.money_fields = dict(row.money_fields)
        self.summary = row.summary
        self.max_attempts = row.max_attempts
        self.backoff_base_seconds = row.backoff_base_seconds
        self.backoff_cap_seconds = row.backoff_cap_seconds
        self.deadline = timedelta(seconds=row.deadline_seconds)
        self.settle_after = timedelta(seconds=row.settle_after_seconds)
        self.ordering = row.ordering
        self.on_conflict = row.on_conflict
        self.payload_retention = timedelta(days=row.payload_retention_days)
        self.key_retention = timedelta(days=row.key_retention_days)
        self.performed_by = row.performed_by
        self.claim_lease = timedelta(seconds=row.claim_lease_seconds)
        level = row.service_level_seconds
        self.service_level = timedelta(seconds=level) if level else None
        self.request = row.request
        self.response = row.response or {}
        self.lookup_config = row.lookup or {}
        self.listing = row.listing or {}
        # The destination's guarantees and limits are the action's.
        self.honours_idempotency_keys = bool(destination.idempotency_header)
        retention = destination.idempotency_key_retention_seconds
        self.idempotency_key_retention = timedelta(seconds=retention) if retention else None
        self.max_concurrency = destination.max_concurrency

    # What the data is.

    def validated(self, data: dict) -> tuple[dict | None, list[FieldError]]:
        if self.quick_check is not None and self.quick_check(data):
            return dict(data), []
        errors = sorted(self.validator.iter_errors(data), key=lambda error: list(error.absolute_path))
        if not errors:
            return dict(data), []
        return None, [FieldError(_field_path(error), error.message) for error in errors]

    def data_schema(self) -> dict:
        return self.json_schema

    def field_names(self) -> list[str]:
        return list(self.json_schema.get("properties", {}))

    def field_titles(self) -> dict[str, str]:
        """Each property's JSON Schema ``title``, where the configuration gives one."""
        return {
            name: spec["title"].strip()
            for name, spec in self.json_schema.get("properties", {}).items()
            if isinstance(spec, dict) and isinstance(spec.get("title"), str) and spec["title"].strip()
        }

    def limits(self) -> Limits:
        destination = self.destination
        return Limits(
            rate_per_second=destination.rate_limit_per_second,
            concurrency=destination.max_concurrency,
            breaker_threshold=destination.breaker_threshold,
            breaker_cooldown=timedelta(seconds=destination.breaker_cooldown_seconds),
        )

    def destination_name(self) -> str:
        return self.destination.slug

    def definition_extras(self) -> dict:
        return {
            "request": self.request,
            "response": self.response,
            "lookup": self.lookup_config,
            "listing": self.listing,
        }

    def secret_values(self) -> list[str]:
        return self.destination.secret_values()

    def configuration(self) -> dict:
        # Its destination's limits pace the calls, they do not change them (``DestinationConfig.described``).
        paced = {name: value for name, value in super().configuration().items() if name not in LIMITS}
        return paced | {"destination": self.destination.described()}

    # Calling the destination.

    def perform(self, operation) -> Success:
        if self.performed_by == CALLER:
            # The workers never claim its operations (``selectors.due_operations``), and a lookup
            # never repeats it (saving refuses ``lookup.repeat``): only a bug gets here.
            raise NotImplementedError(f"action {self.name} is performed by its caller")
        return self.answered(self.call(operation))

    def call(self, operation) -> httpx.Response:
        """Send the operation's request; its answer, whatever the status (a transport failure raises
        its classified error)."""
        context = {"data": operation.payload, "key": operation.key}
        method = self.request.get("method", "POST").upper()
        headers = {
            name: expressions.as_text(templates.render(value, context))
            for name, value in self.request.get("headers", {}).items()
        }
        headers |= self.destination.auth_headers()
        if self.destination.idempotency_header:
            headers[self.destination.idempotency_header] = operation.key
        body = templates.render(self.request["body"], context) if "body" in self.request else None
        form = self.request.get("body_format", "json") == "form"
        return http.deliver(
            method,
            self.destination.url(templates.render_path(self.request["path"], context)),
            json=None if form else body,
            data=dict(form_fields(body)) if form and body is not None else None,
            headers=headers,
            timeout=self.destination.timeout(),
        )

    def answered(self, response: httpx.Response) -> Success:
        """The success an answer is, or the classified error it raises: the action's own outcome
        rules first, then HTTP's (``ledger.actions.http``), each refusal with the vendor's message."""
        body = answers.json_or_none(response)
        outcome = self._ruled_outcome(response.status_code, body)
        if outcome is None and 200 <= response.status_code < 300:
            outcome = "success"
        if outcome == "success":
            record_id = templates.search(self.response.get("record_id", "id"), body) if body is not None else None
            record_id = None if record_id is None else str(record_id)
            return Success(result={"record_id": record_id, "status": response.status_code}, external_id=record_id or "")
        paths = {"code_path": self.destination.error_code, "message_path": self.response.get("message", "")}
        if outcome is None:
            http.classify_response(response, **paths)  # raises: a 2xx without a rule is a success
        assert outcome is not None
        answer = answers.answer_of(response, **paths)
        message = answers.failure_message(answer, response.request.url.host)
        if outcome == "transient":
            retry_after = http.retry_after_seconds(response.headers.get("Retry-After"))
            raise TransientError(message, retry_after=retry_after, answer=answer)
        raise {"permanent": PermanentError, "ambiguous": AmbiguousError}[outcome](message, answer=answer)

    def _ruled_outcome(self, status: int, body: Any) -> str | None:
        for rule in self.response.get("outcomes", []):
            if templates.search(rule["when"], {"status": status, "body": body}):
                return rule["outcome"]
        return None

    # What became of an operation whose answer was lost.

    def lookup(self, operation) -> Found | Absent | CannotTell:
        """Repeat the request under the same key while the vendor still keeps it (its answer is the
        first one's), else the lookup GET, else a person decides. Only an operation whose outcome
        is not known is repeated: the reconciliation audit asks about succeeded ones, and a repeat
        for one the vendor lost would act again."""
        repeat = self.lookup_config.get("repeat") and operation.state != "succeeded"
        if repeat and self.key_still_kept(operation, timezone.now()):
            try:
                success = self.perform(operation)
            except PermanentError as exc:
                return CannotTell(f"the repeat under the same key was refused: {exc.message}", final=True)
            except OutcomeError as exc:
                return CannotTell(f"the repeat under the same key failed: {exc.message}")
            return Found(external_id=success.external_id, result=success.result)
        if "path" in self.lookup_config:
            return self._looked_up(operation)
        return CannotTell(f"action {self.name} has no lookup its destination still answers", final=True)

    def _looked_up(self, operation) -> Found | Absent | CannotTell:
        context = {"data": operation.payload, "key": operation.key}
        url = self.destination.url(templates.render_path(self.lookup_config["path"], context))
        try:
            body = http.send(
                "GET", url, headers=self.destination.auth_headers(), timeout=self.destination.timeout()
            ).json()
        except PermanentError as exc:
            if exc.http_status == 404 and self.lookup_config.get("absent_on_404"):
                return Absent()  # a GET of one record by our reference: no such record
            return CannotTell(f"lookup failed: {exc.message}")
        except (OutcomeError, ValueError) as exc:
            return CannotTell(f"lookup failed: {getattr(exc, 'message', type(exc).__name__)}")
        records = templates.search(self.lookup_config.get("found", "@"), body)
        if isinstance(records, dict):
            records = [records]
        if not isinstance(records, list):
            return CannotTell("the lookup's answer holds no list of records where `found` points")
        if "reference" in self.lookup_config:
            # Only the records carrying our key: a vendor that ignores the search's filter answers
            # with others', and one of them alone would be taken for ours.
            records = [
                record
                for record in records
                if expressions.as_text(templates.search(self.lookup_config["reference"], record)) == operation.key
            ]
        if len(records) > 1:
            return CannotTell(f"{len(records)} records carry this key at the destination", final=True)
        if not records:
            return Absent()
        record_id = templates.search(self.lookup_config.get("record_id", "id"), records[0])
        record_id = None if record_id is None else str(record_id)
        return Found(external_id=record_id or "", result={"record_id": record_id})

    # The two-way reconciliation audit (``reconciliation.two_way_audit``).

    @property
    def lists_records(self) -> bool:
        return bool(self.listing)

    def list_records(self, created_after: datetime, created_before: datetime) -> Iterator[dict]:
        """The destination's records created in the window, each as the audit reads one: ``id``,
        ``reference`` (our key), ``created_at`` (ISO 8601) and ``payload`` (the listed fields)."""
        context = {
            "created_after": created_after.isoformat(),
            "created_before": created_before.isoformat(),
            "created_after_epoch": int(created_after.timestamp()),
            "created_before_epoch": int(created_before.timestamp()),
        }
        path = templates.render_path(self.listing["path"], context)
        page_param, page_size = self.listing.get("page_param"), self.listing.get("page_size", 100)
        cursor_param, next_cursor = self.listing.get("cursor_param"), self.listing.get("next_cursor")
        params: dict = {page_param: 1} if page_param else {}
        if size_param := self.listing.get("page_size_param"):
            params[size_param] = page_size
        for _ in range(LISTING_PAGE_LIMIT):
            body = http.send(
                "GET",
                self.destination.url(path),
                params=params or None,
                headers=self.destination.auth_headers(),
                timeout=self.destination.timeout(),
            ).json()
            records = templates.search(self.listing.get("records", "@"), body) or []
            yield from (self._listed(record) for record in records)
            if page_param and len(records) >= page_size:  # numbered pages: a full one may have a next
                params[page_param] += 1
            elif cursor_param and next_cursor and (cursor := templates.search(next_cursor, body)):
                params[cursor_param] = cursor
            else:
                return
        raise TransientError(f"destination {self.destination.slug} listed more than {LISTING_PAGE_LIMIT} pages")

    def _listed(self, record: dict) -> dict:
        fields = self.listing.get("fields", {})
        created_at = templates.search(self.listing.get("created_at", "created_at"), record)
        if created_at is None:
            raise TransientError(
                f"destination {self.destination.slug} listed a record without a creation time where "
                f"listing.created_at ({self.listing.get('created_at', 'created_at')}) points"
            )
        return {
            "id": str(templates.search(self.listing.get("record_id", "id"), record)),
            "reference": templates.search(self.listing["reference"], record),
            "created_at": _iso(created_at),
            "payload": {name: templates.search(expression, record) for name, expression in fields.items()},
        }

    def our_reference(self, record: dict) -> str | None:
        return record.get("reference")

    def record_payload(self, operation) -> dict:
        return {name: operation.payload.get(name) for name in self.listing.get("fields", {})}


def form_fields(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A body as form fields, nested values in the bracket convention most vendors read (Stripe's
    ``metadata[source_key]=…``, ``items[0][price]=…``)."""
    if isinstance(value, dict):
        pairs = []
        for name, inner in value.items():
            pairs += form_fields(inner, f"{prefix}[{name}]" if prefix else str(name))
        return pairs
    if isinstance(value, list):
        return [pair for index, inner in enumerate(value) for pair in form_fields(inner, f"{prefix}[{index}]")]
    return [] if value is None else [(prefix, expressions.as_text(value))]


def _iso(value: Any) -> str:
    """A record's creation time as ISO 8601 with its zone (epoch seconds, as Stripe's `created`, or
    text; a time without a zone is taken as UTC)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC).isoformat()
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise TransientError(f"a listed record's creation time {str(value)[:40]!r} is not ISO 8601") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _field_path(error: jsonschema.ValidationError) -> str:
    path = ["data", *(str(part) for part in error.absolute_path)]
    if error.validator == "required":  # the missing field is named in the message, not the path
        missing = error.message.split("'")[1] if error.message.count("'") >= 2 else ""
        path += [missing] if missing else []
    elif error.validator == "additionalProperties" and error.message.count("'") >= 2:
        path.append(error.message.split("'")[1])
    return ".".join(path)
