"""The Django project: settings, URLs, middleware, the operator console and the HTTP API over the ledger."""
