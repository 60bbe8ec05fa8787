"""The ledger in the Django admin: read-only, and for a person who is not a superuser limited to
their workspaces (``ledger.core.roles``). Changes go through the services, never the admin; the one
exception is who belongs to which workspace (Membership), which a superuser manages here.

The big lists (millions of operations, deliveries, attempts and audit events) are read with their
size in mind: each is ordered along an index (newest first: by id, which is creation order, or by
the audit trail's (created_at, id)), counted only up to ``CappedPaginator.cap``, filtered on choices
known without reading the table, searched by the start of the operation's key and any part of
its request id (the indexes of migration 0007), and loads the related rows it shows in one query.

Payloads, results and conflicts are shown as ``ledger.core.privacy`` masks them for the person (never
the raw JSON fields): sensitive values only to those who may see them in the row's workspace.
"""

from ledger.admin import integrations, machinery, operations, people, workspaces  # noqa: F401  each registers its admins
