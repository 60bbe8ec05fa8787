"""The operator console: Django templates over the ledger; every change goes through a service."""
