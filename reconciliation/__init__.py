"""Reconciliation: unknown outcomes asked of the destination, and the two-way audit of the ledger against it."""
