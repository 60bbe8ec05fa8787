"""Signed webhooks in: a delivery to a Source (``ledger.models.Source``) is checked as its sender
signs it (``ledger.integrations.signatures``), mapped by the source's rules (JMESPath) from the sender's
body to our envelope, and submitted as any event: the sender's delivery id becomes ``delivery_id``
and its signed time ``occurred_at``, so a redelivery is a duplicate and one after the key window is
stale. Every arrival is recorded: one whose signature is refused (or a verification challenge,
which anyone may send) counted per client address and hour (``ledger.intake.refusals``), a signed
one that is refused as an invalid delivery (without the body), an event type no rule maps as
``ignored``.
"""

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from jmespath.exceptions import JMESPathError  # type: ignore[import-untyped]

from ledger.actions import expressions, registry, secret_names
from ledger.core.transitions import save_audited
from ledger.intake import decoding, refusals, submit
from ledger.intake.submit import IntakeResult
from ledger.integrations import signatures
from ledger.integrations.saving import ENV_NAME, SLUG
from ledger.models import Delivery, Source

IGNORED = Delivery.Outcome.IGNORED


class SecretMissing(RuntimeError):
    """The source names an environment variable that holds no secret: nothing can be verified."""


class SecretNotOwned(SecretMissing):
    """The source names a variable that is not its workspace's (``secret_names``), saved before the
    rule was: it is not read, so nothing can be verified until it is renamed."""


@dataclass
class Ignored:
    """A verified delivery of an event type no rule maps: recorded, not taken."""

    event: str
    delivery: Delivery
    http_status: int = 202


# What a delivery to a source came to: an intake result (taken, or refused), or ignored.
HookResult = IntakeResult | Ignored


def receive(source: Source, body: bytes, headers, *, address: str, now: datetime | None = None) -> HookResult:
    """Check, map and submit one delivery of ``body`` (the raw bytes as they arrived) to ``source``
    from the client at ``address``."""
    now = now or timezone.now()
    sender = _sender(source)
    secrets = secrets_of(source)
    try:
        signed = signatures.verify(source.scheme, body, headers, secrets, tolerance=source.tolerance_seconds, now=now)
    except signatures.Refused as refused:
        errors = [{"field": _SIGNATURE_HEADER[source.scheme], "message": refused.message}]
        result = refusals.refuse_unverified(
            source, address=address, reason=refused.reason, errors=errors, http_status=401
        )
        return result
    try:
        document = decoding.decode_json(body)
    except decoding.MalformedJSON as exc:
        return _refuse(source, sender, exc.reason, 400, exc.errors)
    signed = signatures.described(source.scheme, signed, document)
    # One budget for the delivery's rules together, so a rule of many fields cannot multiply it.
    budget = expressions.Budget.for_input(len(body))
    try:
        rule = matching_rule(source.rules, signed.event, document, budget)
        envelope = _envelope(rule, document, signed, budget) if rule is not None else None
    except MappingFailed as failed:
        return _refuse(source, sender, "invalid_input", 422, [failed.error])
    if rule is None:
        return Ignored(signed.event, _record_ignored(source, delivery_id=signed.delivery_id))
    return submit.submit_event(workspace=source.workspace, raw=envelope, **sender)


def answer_challenge(source: Source, headers, *, address: str) -> str | None:
    """The response to the sender's endpoint verification challenge, if the request is one (its
    body, if any, is not read): counted, as anyone may send one (``ledger.intake.refusals``)."""
    answer = signatures.challenge_response(source.scheme, headers, secrets_of(source))
    if answer is not None:
        refusals.count_arrival(source, address=address, reason=refusals.CHALLENGE)
    return answer


def _record_ignored(source: Source, *, delivery_id: str) -> Delivery:
    """A verified arrival that carries no event to take (no rule maps it)."""
    return Delivery.objects.create(
        workspace=source.workspace, outcome=IGNORED, sender_delivery_id=delivery_id[:200], **_sender(source)
    )


def _sender(source: Source) -> dict:
    return {"source": Delivery.Source.WEBHOOK, "submitted_by": f"source:{source.slug}"}


def secrets_of(source: Source) -> list[str]:
    """The secrets a delivery may be signed with: the current one, and the one being retired. Read
    only from the source's workspace's variables: a source saved with another name is refused."""
    for name in filter(None, (source.secret_env, source.previous_secret_env)):
        if problem := secret_names.name_problem(source.workspace, name):
            raise SecretNotOwned(f"source {source.slug}: {problem} (rename it: docs/operations.md)")
    current = os.environ.get(source.secret_env, "")
    if not signatures.usable_secret(source.scheme, current):
        raise SecretMissing(
            f"source {source.slug}: environment variable {source.secret_env} holds no usable {source.scheme} secret"
        )
    previous = os.environ.get(source.previous_secret_env, "") if source.previous_secret_env else ""
    return [current, previous] if signatures.usable_secret(source.scheme, previous) else [current]


class MappingFailed(ValueError):
    """A rule's expression failed on this body (a function given the wrong type), or went over its
    budget: the delivery is refused naming the rule, recorded, for a person to fix the rule or the
    sender."""

    def __init__(self, where: str, exc: JMESPathError):
        super().__init__(where)
        said = str(exc) if isinstance(exc, expressions.OverBudget) else f"the expression failed on this body: {exc}"
        self.error = {"field": where, "message": said[:500]}


def matching_rule(rules: list[dict], event: str, document: Any, budget: expressions.Budget) -> dict | None:
    """The first rule whose event is ``event`` and whose condition (if any) holds of the body."""
    for index, rule in enumerate(rules):
        if rule.get("event") != event:
            continue
        when = rule.get("when")
        if when and not _search(when, document, f"rules[{index}].when", budget):
            continue
        return rule
    return None


def _envelope(rule: dict, document: Any, signed: signatures.Signed, budget: expressions.Budget) -> dict:
    data = {
        name: value
        for name, path in rule["data"].items()
        if (value := _search(path, document, f"rule for {rule['event']}: data.{name}", budget)) is not None
    }
    envelope: dict[str, Any] = {"action": rule["action"], "data": data}
    if signed.delivery_id:
        envelope["delivery_id"] = signed.delivery_id
    if (occurred_at := signed.occurred_at or signed.signed_at) is not None:
        envelope["occurred_at"] = occurred_at.isoformat()
    path = rule.get("correlation_id")
    where = f"rule for {rule['event']}: correlation_id"
    if path and isinstance(correlation := _search(path, document, where, budget), str):
        envelope["correlation_id"] = correlation
    return envelope


def _refuse(source, sender, reason: str, status: int, errors: list[dict]) -> IntakeResult:
    """A signed delivery refused: the sender is known, so it is recorded as any refused arrival."""
    return submit.record_blocked_delivery(
        workspace=source.workspace, reason=reason, errors=errors, http_status=status, **sender
    )


_SIGNATURE_HEADER: dict[str, str] = {
    Source.Scheme.STANDARD_WEBHOOKS: "webhook-signature",
    Source.Scheme.GITHUB: "X-Hub-Signature-256",
    Source.Scheme.STRIPE: "Stripe-Signature",
}


def _search(expression: str, document: Any, where: str, budget: expressions.Budget) -> Any:
    """The expression's value, counted against the delivery's budget (it becomes the envelope's)."""
    try:
        value = expressions.search(expression, document, budget)
        budget.charge(value)
    except JMESPathError as exc:
        raise MappingFailed(where, exc) from None
    return value


# --- configuring a source (the admin; ``integrations apply`` later) --------------------------------


class SourceError(ValueError):
    """A source's configuration that cannot work; the message says where."""


def save_source(source: Source, *, actor: str) -> Source:
    """Save ``source`` after checking it would work (its rules compile and name registered actions,
    its secrets are named by its workspace's environment variables, never given), audited in its
    workspace."""
    if problems := source_problems(source):
        raise SourceError("; ".join(problems))
    save_audited(
        source,
        actor=actor,
        noun="source",
        workspace=source.workspace,
        message=f"source {source.slug} ({source.scheme}): {len(source.rules)} rule(s)",
    )
    return source


MAX_TOLERANCE_SECONDS = 86400


def source_problems(source: Source, *, also_known: frozenset[str] = frozenset()) -> list[str]:
    """What would keep ``source`` from working, each problem saying where."""
    problems = rule_problems(source.rules, also_known=also_known)
    if not isinstance(source.slug, str) or not SLUG.fullmatch(source.slug):
        problems.append("slug: letters, digits, - and _, at most 50 (it is the URL /api/v1/hooks/<slug>)")
    if source.scheme not in Source.Scheme.values:
        problems.append(f"scheme: one of {', '.join(Source.Scheme.values)}")
    for name in ("secret_env", "previous_secret_env"):
        value = getattr(source, name)
        if not isinstance(value, str) or ((value or name == "secret_env") and not ENV_NAME.fullmatch(value)):
            problems.append(f"{name}: the name of an environment variable (A-Z, 0-9, _), not the secret itself")
        elif value and source.workspace_id and (problem := secret_names.name_problem(source.workspace, value)):
            problems.append(f"{name}: {problem}")
    tolerance = source.tolerance_seconds
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or not 1 <= tolerance <= MAX_TOLERANCE_SECONDS:
        problems.append(f"tolerance_seconds: whole seconds from 1 to {MAX_TOLERANCE_SECONDS}")
    return problems


def secret_status(source: Source) -> str:
    """Whether the secrets a source names are set in this process's environment (never their
    values). A variable that is not the workspace's is not looked at: its admin learns nothing of it."""
    named = [name for name in (source.secret_env, source.previous_secret_env) if name]
    return ", ".join(f"{name}: {_secret_state(source, name)}" for name in named)


def _secret_state(source: Source, name: str) -> str:
    if secret_names.name_problem(source.workspace, name):
        return "not this workspace's variable, rename it (docs/operations.md)"
    value = os.environ.get(name, "")
    if not value:
        return "missing"
    return "set" if signatures.usable_secret(source.scheme, value) else "set, but not a usable secret"


# --- checking a source's rules ----------------------------------------------------------------------


def rule_problems(rules: Any, *, also_known: frozenset[str] = frozenset()) -> list[str]:
    """What is wrong with ``rules``, each problem saying where: the shape, an action that is not
    registered, an expression that does not compile or that could build without bound
    (``ledger.actions.expressions.problem``)."""
    if not isinstance(rules, list):
        return ["rules: must be a list of rules"]
    problems = []
    for index, rule in enumerate(rules):
        where = f"rules[{index}]"
        if not isinstance(rule, dict):
            problems.append(f"{where}: must be an object")
            continue
        if unknown := sorted(set(rule) - {"event", "when", "action", "data", "correlation_id"}):
            problems.append(f"{where}: unknown keys {', '.join(unknown)}")
        if not isinstance(rule.get("event"), str) or not rule["event"]:
            problems.append(f"{where}.event: the sender's event type, e.g. invoice.paid")
        if rule.get("action") not in registry and rule.get("action") not in also_known:
            problems.append(f"{where}.action: {rule.get('action')!r} is not a registered action")
        if not isinstance(rule.get("data"), dict) or not rule["data"]:
            problems.append(f"{where}.data: an object of field -> JMESPath expression")
        expressions = {"when": rule.get("when"), "correlation_id": rule.get("correlation_id")}
        expressions |= {f"data.{name}": path for name, path in (rule.get("data") or {}).items()}
        problems += [
            f"{where}.{name}: {problem}"
            for name, path in expressions.items()
            if path is not None and (problem := _expression_problem(path))
        ]
    return problems


def _expression_problem(path: Any) -> str:
    if not isinstance(path, str) or not path:
        return "must be a JMESPath expression"
    return expressions.problem(path)
