"""Integrations as a file (``manage.py integrations apply|export``): destinations, HTTP actions,
sources of signed webhooks and subscriptions to notifications, written as YAML or JSON and applied
as one change. A file is checked whole first: one problem anywhere and nothing changes. Applying
the same file twice changes nothing the second time; every change is saved through the same services as the admin's
(``ledger.integrations.saving``, ``ledger.integrations.sources.save_source``,
``ledger.integrations.subscriptions.save_subscription``), and so audited.
docs/integrations.md has a complete example:

    destinations:
      - slug: helpdesk
        base_url: https://helpdesk.example.com/api
        auth: bearer                        # none | bearer | basic | header
        secret_env: HELPDESK_TOKEN          # the variable's name, never the secret
    http_actions:
      - name: create-ticket
        destination: helpdesk
        schema: {type: object, properties: {...}, required: [...]}
        identity_fields: [request_id]
        normalisers: {request_id: identifier}
        fingerprint_fields: [request_id, title]
        request: {method: POST, path: /tickets, body: {title: "{{ data.title }}", source_key: "{{ key }}"}}
        lookup: {path: "/tickets?source_key={{ key }}"}
    sources:
      - slug: billing
        workspace: acme
        scheme: stripe                      # standard_webhooks | github | stripe
        secret_env: OPSCONSOLE_SOURCE_ACME_STRIPE   # a variable of its workspace (secret_names)
        rules:
          - {event: invoice.paid, action: create-ticket, data: {request_id: data.object.id, ...}}
    subscriptions:
      - name: acme-flows
        workspace: acme
        url: https://flows.example.com/webhooks/opsconsole
        events: [operation.due, operation.needs_review]
        secret_env: OPSCONSOLE_SOURCE_ACME_NOTIFY   # a whsec_ secret, a variable of its workspace
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import yaml
from django.db import models, transaction

from ledger.integrations import saving, sources, subscriptions
from ledger.models import Destination, HttpAction, Source, Subscription, Workspace


class IntegrationsError(ValueError):
    """A file that cannot be applied: ``problems`` says each thing wrong, and where."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Section:
    """One kind of row a file holds: its list's name, the row's key, its fields and their defaults."""

    name: str
    noun: str
    model: type[models.Model]
    key: str
    fields: tuple[str, ...]
    defaults: dict[str, Any]
    # (row, names of the other sections' rows the file declares) -> problems
    problems: Callable[..., list[str]]
    save: Callable[..., Any]
    # A field that names a row of another model by its key: (model, that model's key field).
    references: dict[str, tuple[type[models.Model], str]] = field(default_factory=dict)


def _model_defaults(model: type[models.Model], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: cast(models.Field, model._meta.get_field(name)).get_default() for name in names}


DESTINATION_FIELDS = (
    "base_url",
    "auth",
    "auth_header",
    "secret_env",
    "connect_timeout_seconds",
    "timeout_seconds",
    "idempotency_header",
    "idempotency_key_retention_seconds",
    "rate_limit_per_second",
    "max_concurrency",
    "breaker_threshold",
    "breaker_cooldown_seconds",
    "error_code",
)
HTTP_ACTION_FIELDS = (
    "destination",
    "schema",
    "identity_fields",
    "normalisers",
    "fingerprint_fields",
    "consequential",
    "sensitive_fields",
    "money_fields",
    "summary",
    "max_attempts",
    "backoff_base_seconds",
    "backoff_cap_seconds",
    "deadline_seconds",
    "settle_after_seconds",
    "ordering",
    "on_conflict",
    "payload_retention_days",
    "key_retention_days",
    "performed_by",
    "claim_lease_seconds",
    "service_level_seconds",
    "request",
    "response",
    "lookup",
    "listing",
)
SOURCE_FIELDS = ("workspace", "scheme", "secret_env", "previous_secret_env", "tolerance_seconds", "rules")
SUBSCRIPTION_FIELDS = ("workspace", "url", "events", "secret_env", "active")

SECTIONS = (
    Section(
        "destinations",
        "destination",
        Destination,
        "slug",
        DESTINATION_FIELDS,
        _model_defaults(Destination, DESTINATION_FIELDS),
        problems=lambda row, declared: saving.destination_problems(row),
        save=saving.save_destination,
    ),
    Section(
        "http_actions",
        "HTTP action",
        HttpAction,
        "name",
        HTTP_ACTION_FIELDS,
        _model_defaults(HttpAction, HTTP_ACTION_FIELDS[1:]),
        problems=lambda row, declared: saving.http_action_problems(row),
        save=saving.save_http_action,
        references={"destination": (Destination, "slug")},
    ),
    Section(
        "sources",
        "source",
        Source,
        "slug",
        SOURCE_FIELDS,
        {"previous_secret_env": "", "tolerance_seconds": 300, "rules": []},
        problems=lambda row, declared: sources.source_problems(row, also_known=declared["http_actions"]),
        save=sources.save_source,
        references={"workspace": (Workspace, "slug")},
    ),
    Section(
        "subscriptions",
        "subscription",
        Subscription,
        "name",
        SUBSCRIPTION_FIELDS,
        {"active": True},
        problems=lambda row, declared: subscriptions.subscription_problems(row),
        save=subscriptions.save_subscription,
        references={"workspace": (Workspace, "slug")},
    ),
)
_BY_NAME = {section.name: section for section in SECTIONS}


@dataclass
class Change:
    """One row the file creates or changes, with the fields that differ (before, after)."""

    noun: str
    key: str
    created: bool
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.created:
            return f"{self.noun} {self.key}: created"
        return f"{self.noun} {self.key}: " + ", ".join(
            f"{name} {before!r} -> {after!r}" for name, (before, after) in self.fields.items()
        )


def read(text: str) -> dict:
    """The configuration a file holds (YAML, of which JSON is a part), every key of a mapping once:
    IntegrationsError naming each key written twice, with its line and column."""
    loader = _StrictLoader(text)
    try:
        document = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise IntegrationsError([f"not YAML or JSON: {exc}"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise IntegrationsError(loader.duplicates)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise IntegrationsError([f"the file must hold a mapping with lists: {', '.join(_BY_NAME)}"])
    return document


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader keeps the last of a key written twice: a row reviewed with one
    ``base_url`` would be applied with the other, and a second ``destinations:`` would drop the
    first. This one notes every such key (``duplicates``) where it is written. A key a ``<<`` merge
    brings in is no duplicate: the mapping's own key overriding it is what a merge is for."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[str] = []
        self._checked: set[int] = set()

    def flatten_mapping(self, node):
        # Called for each mapping before its keys are read, and for each mapping merged into one;
        # once merged, a node holds the merged keys too, so each node is checked once, as written.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._note_duplicates(node)
        super().flatten_mapping(node)

    def _note_duplicates(self, node: yaml.MappingNode) -> None:
        first_marks: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                first = first_marks.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key, which the constructor refuses in its own words
            if first is not key_node.start_mark:
                mark = key_node.start_mark
                self.duplicates.append(
                    f"line {mark.line + 1}, column {mark.column + 1}: {key} appears twice in this mapping "
                    f"(first at line {first.line + 1}, column {first.column + 1})"
                )


@dataclass
class Planned:
    section: Section
    row: models.Model
    change: Change | None


def plan(document: dict) -> list[Planned]:
    """Every row ``document`` declares (unsaved, in the order they must be saved), each with its
    change (None: unchanged); IntegrationsError listing every problem when any."""
    problems = [f"{name}: unknown section (known: {', '.join(_BY_NAME)})" for name in document if name not in _BY_NAME]
    declared = {section.name: _declared_keys(document, section) for section in SECTIONS}
    planned: list[Planned] = []
    rows_by_key: dict[tuple[type, str], models.Model] = {}
    for section in SECTIONS:
        entries = document.get(section.name) or []
        if not isinstance(entries, list):
            problems.append(f"{section.name}: must be a list")
            continue
        seen = set()
        for index, entry in enumerate(entries):
            where = f"{section.name}[{index}]"
            row, before, found = _proposed(section, entry, where, rows_by_key)
            problems += found
            if row is None:
                continue
            key = getattr(row, section.key)
            if key in seen:
                problems.append(f"{where}: the {section.key} {key} appears twice")
            seen.add(key)
            rows_by_key[(section.model, key)] = row
            problems += [f"{where}.{problem}" for problem in section.problems(row, declared)]
            planned.append(Planned(section, row, _change(section, row, before)))
    if problems:
        raise IntegrationsError(problems)
    return planned


def apply(
    document: dict, *, actor: str, dry_run: bool = False, check: Callable[[list[Planned]], None] | None = None
) -> list[Change]:
    """Apply ``document`` as one change (nothing when ``dry_run``); returns the changes it makes.
    ``check``, when given, sees the plan first and may refuse it (IntegrationsError): the file is
    planned once (``openapi_check.check``)."""
    planned = plan(document)
    if check is not None:
        check(planned)
    changed = [(item, item.change) for item in planned if item.change is not None]
    if not dry_run and changed:
        with transaction.atomic():
            for item, change in changed:
                try:
                    item.section.save(item.row, actor=actor)
                except (saving.ConfigurationRefused, sources.SourceError, subscriptions.SubscriptionRefused) as refused:
                    # Checked above, so only a change made meanwhile by someone else gets here: all rolled back.
                    raise IntegrationsError([f"{item.section.name} {change.key}: {refused}"]) from None
    return [change for _, change in changed]


def export() -> str:
    """Every destination, HTTP action and source, as a file ``apply`` takes back unchanged."""
    document = {}
    for section in SECTIONS:
        rows = section.model._default_manager.order_by(section.key)
        document[section.name] = [
            {section.key: getattr(row, section.key), **{name: _value(section, row, name) for name in section.fields}}
            for row in rows
        ]
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def _declared_keys(document: dict, section: Section) -> frozenset[str]:
    entries = document.get(section.name)
    if not isinstance(entries, list):
        return frozenset()
    return frozenset(
        entry[section.key] for entry in entries if isinstance(entry, dict) and isinstance(entry.get(section.key), str)
    )


def _proposed(section: Section, entry: Any, where: str, rows_by_key: dict) -> tuple[Any, dict | None, list[str]]:
    """The row ``entry`` describes (the stored one, if there is one, updated in memory) and what it
    held before (None: a new row); or the problems."""
    if not isinstance(entry, dict):
        return None, None, [f"{where}: must be a mapping"]
    problems = [f"{where}.{name}: unknown field" for name in entry if name not in (section.key, *section.fields)]
    key = entry.get(section.key)
    if not isinstance(key, str) or not key:
        problems.append(f"{where}.{section.key}: required")
    references: dict[str, models.Model] = {}
    for name, (model, model_key) in section.references.items():
        named = entry.get(name)
        target = rows_by_key.get((model, named)) if isinstance(named, str) else None
        if target is None and isinstance(named, str):
            target = model._default_manager.filter(**{model_key: named}).first()
        if target is None:
            problems.append(f"{where}.{name}: {named!r} is not a {model._meta.verbose_name}")
        else:
            references[name] = target
    if problems:
        return None, None, problems
    row = section.model._default_manager.filter(**{section.key: key}).first() or section.model(**{section.key: key})
    before = {name: _value(section, row, name) for name in section.fields} if row.pk else None
    if row.pk and isinstance(row, Source | Subscription) and row.workspace_id != references["workspace"].pk:
        return None, None, [f"{where}.workspace: {section.noun} {key} belongs to workspace {row.workspace.slug}"]
    for name in section.fields:
        value = references[name] if name in references else entry.get(name, section.defaults.get(name, ""))
        setattr(row, name, value)
    return row, before, []


def _change(section: Section, row, before: dict | None) -> Change | None:
    key = getattr(row, section.key)
    if before is None:
        return Change(section.noun, key, created=True)
    after = {name: _value(section, row, name) for name in section.fields}
    differing = {name: (before[name], after[name]) for name in section.fields if before[name] != after[name]}
    return Change(section.noun, key, created=False, fields=differing) if differing else None


def _value(section: Section, row, name: str) -> Any:
    if name in section.references:
        target = getattr(row, name, None)
        return getattr(target, section.references[name][1]) if target is not None else None
    return getattr(row, name)
