"""The ledger's management commands and what their arguments name."""
