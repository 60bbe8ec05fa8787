"""The HTTP API under /api/v1/ (django-ninja): an interface, like the console, over the ledger's
intake and reads."""
