"""django-q2 tasks of reconciliation: thin and safe to run twice (a verdict needs `unknown`)."""

from dataclasses import asdict

from ledger.models import Operation
from ledger.states import State
from reconciliation.reconcile import reconcile_operation, reconcile_unknown_operations
from reconciliation.two_way_audit import AuditError, run_audit


def reconcile() -> dict:
    return asdict(reconcile_unknown_operations())


def reconcile_one(operation_id: int) -> str:
    """Ask about one unknown operation whose next lookup is due (enqueued for that time)."""
    operation = Operation.objects.filter(pk=operation_id, state=State.UNKNOWN).first()
    return reconcile_operation(operation) if operation else "not_due"


def audit() -> dict:
    """The scheduled reconciliation audit, over the window since the previous successful run."""
    try:
        run = run_audit()
    except AuditError as exc:  # scheduled too soon after the previous run: nothing to audit yet
        return {"status": "skipped", "reason": str(exc)}
    return {"run": run.pk, "status": run.status}
