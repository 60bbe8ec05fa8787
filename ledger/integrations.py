"""Integrations as a file (``manage.py integrations apply|export``): the sources of signed webhooks
(and, with the rest of issue 26, destinations and HTTP actions) written as YAML or JSON, applied as
one change. A file is checked whole first: one problem anywhere and nothing changes. Applying the
same file twice changes nothing the second time; every change is saved through the same service
as the admin's (``ledger.intake.sources.save_source``), and so audited.

    sources:
      - slug: billing
        workspace: acme
        scheme: stripe                      # standard_webhooks | github | stripe
        secret_env: STRIPE_WEBHOOK_SECRET   # the variable's name, never the secret
        previous_secret_env: ""             # while rotating
        tolerance_seconds: 300
        rules:
          - event: invoice.paid
            action: issue-refund
            data: {request_id: data.object.id, ...}
"""

from dataclasses import dataclass, field
from typing import Any

import yaml
from django.db import transaction

from ledger.intake import sources
from ledger.models import Source, Workspace

SOURCE_FIELDS = ("workspace", "scheme", "secret_env", "previous_secret_env", "tolerance_seconds", "rules")
_DEFAULTS = {"previous_secret_env": "", "tolerance_seconds": 300, "rules": []}
SECTIONS = ("sources",)


class IntegrationsError(ValueError):
    """A file that cannot be applied: ``problems`` says each thing wrong, and where."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Change:
    """One source the file creates or changes, with the fields that differ (before, after)."""

    slug: str
    created: bool
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.created:
            return f"source {self.slug}: created"
        return f"source {self.slug}: " + ", ".join(
            f"{name} {before!r} -> {after!r}" for name, (before, after) in self.fields.items()
        )


def read(text: str) -> dict:
    """The configuration a file holds (YAML, of which JSON is a part)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise IntegrationsError([f"not YAML or JSON: {exc}"]) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise IntegrationsError(["the file must hold a mapping with a `sources` list"])
    return document


def plan(document: dict) -> list[tuple[Source, Change]]:
    """The sources ``document`` creates or changes (unsaved), each with its change; IntegrationsError
    listing every problem when any."""
    problems = [f"{name}: unknown section (known: {', '.join(SECTIONS)})" for name in document if name not in SECTIONS]
    entries = document.get("sources") or []
    if not isinstance(entries, list):
        raise IntegrationsError([*problems, "sources: must be a list"])
    planned, seen = [], set()
    for index, entry in enumerate(entries):
        where = f"sources[{index}]"
        source, before, found = _proposed(entry, where)
        problems += found
        if source is None:
            continue
        if source.slug in seen:
            problems.append(f"{where}: the slug {source.slug} appears twice")
        seen.add(source.slug)
        problems += [f"{where}.{problem}" for problem in sources.source_problems(source)]
        if (change := _change(source, before)) is not None:
            planned.append((source, change))
    if problems:
        raise IntegrationsError(problems)
    return planned


def apply(document: dict, *, actor: str, dry_run: bool = False) -> list[Change]:
    """Apply ``document`` as one change (nothing when ``dry_run``); returns the changes it makes."""
    planned = plan(document)
    if not dry_run:
        with transaction.atomic():
            for source, _ in planned:
                sources.save_source(source, actor=actor)
    return [change for _, change in planned]


def export() -> str:
    """Every source, as a file ``apply`` takes back unchanged."""
    rows = Source.objects.select_related("workspace").order_by("slug")
    entries = [{"slug": row.slug, **{name: _value(row, name) for name in SOURCE_FIELDS}} for row in rows]
    return yaml.safe_dump({"sources": entries}, sort_keys=False, allow_unicode=True)


def _proposed(entry: Any, where: str) -> tuple[Source | None, dict | None, list[str]]:
    """The source ``entry`` describes (its row, if it exists, updated in memory) and what the row
    held before (None: a new source); or the problems."""
    if not isinstance(entry, dict):
        return None, None, [f"{where}: must be a mapping"]
    problems = [f"{where}.{name}: unknown field" for name in entry if name not in ("slug", *SOURCE_FIELDS)]
    slug, slug_name = entry.get("slug"), entry.get("workspace")
    if not isinstance(slug, str) or not slug:
        problems.append(f"{where}.slug: required")
    workspace = Workspace.objects.filter(slug=slug_name).first() if isinstance(slug_name, str) else None
    if workspace is None:
        problems.append(f"{where}.workspace: {slug_name!r} is not a workspace")
    if entry.get("scheme") not in Source.Scheme.values:
        problems.append(f"{where}.scheme: one of {', '.join(Source.Scheme.values)}")
    tolerance = entry.get("tolerance_seconds", _DEFAULTS["tolerance_seconds"])
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 1:
        problems.append(f"{where}.tolerance_seconds: a whole number of seconds, at least 1")
    if problems:
        return None, None, problems
    source = Source.objects.select_related("workspace").filter(slug=slug).first() or Source(slug=slug)
    if source.pk and source.workspace_id != workspace.pk:
        return None, None, [f"{where}.workspace: source {slug} belongs to workspace {source.workspace.slug}"]
    before = {name: _value(source, name) for name in SOURCE_FIELDS} if source.pk else None
    source.workspace = workspace
    for name in SOURCE_FIELDS[1:]:
        setattr(source, name, entry.get(name, _DEFAULTS.get(name, "")))
    return source, before, []


def _change(source: Source, before: dict | None) -> Change | None:
    if before is None:
        return Change(source.slug, created=True)
    after = {name: _value(source, name) for name in SOURCE_FIELDS}
    differing = {name: (before[name], after[name]) for name in SOURCE_FIELDS if before[name] != after[name]}
    return Change(source.slug, created=False, fields=differing) if differing else None


def _value(source: Source, name: str) -> Any:
    return source.workspace.slug if name == "workspace" else getattr(source, name)
