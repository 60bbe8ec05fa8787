"""``reconcile``: run reconciliation or the audit by hand."""
