"""The django-q2 schedules opsconsole relies on, as they are now.

The migrations that created them (ledger 0003, 0012, 0030, 0060; reconciliation 0001, 0002) state each
row themselves and call ``ledger.migration_helpers.ensure_schedule``, not this module: a schedule
changed here needs a migration of its own to reach a database.
"""

from ledger.migration_helpers import ensure_schedule

SWEEP_SCHEDULE = "opsconsole-sweep"
RECONCILE_SCHEDULE = "opsconsole-reconcile"
PURGE_SCHEDULE = "opsconsole-purge"
AUDIT_SCHEDULE = "opsconsole-reconcile-audit"
AUDIT_HEADS_SCHEDULE = "opsconsole-audit-heads"
REINDEX_SCHEDULE = "opsconsole-reindex"


def ensure_sweep_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=SWEEP_SCHEDULE, func="ledger.tasks.sweep")


def ensure_reconcile_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=RECONCILE_SCHEDULE, func="reconciliation.tasks.reconcile")


def ensure_purge_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=PURGE_SCHEDULE, func="ledger.tasks.purge", minutes=24 * 60)


def ensure_audit_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=AUDIT_SCHEDULE, func="reconciliation.tasks.audit", minutes=60)


def ensure_audit_heads_schedule(schedule_model) -> None:
    """The audit chains' heads, exported every 5 minutes (ledger.core.audit_heads): an event cut off
    the end of a chain after an export is found by ``verify_audit --heads``."""
    ensure_schedule(schedule_model, name=AUDIT_HEADS_SCHEDULE, func="ledger.tasks.export_audit_heads", minutes=5)


def ensure_reindex_schedule(schedule_model) -> None:
    """The purged tables' bloated indexes rebuilt weekly (ledger.reindex)."""
    ensure_schedule(schedule_model, name=REINDEX_SCHEDULE, func="ledger.tasks.reindex", minutes=7 * 24 * 60)
