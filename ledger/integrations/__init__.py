"""Configured integrations: the systems a workspace connects without code. Sources of signed webhooks
in (``sources``, ``signatures``; the secrets' names, ``ledger.actions.secret_names``), destinations
and the HTTP actions that call them out (``configured``, ``http_action``, ``destination_config``,
``templates``, ``schema_patterns``),
saved through one service that checks and audits a row (``saving``, ``sources.save_source``),
written as one file (``file``) and checked against the vendors' OpenAPI documents
(``openapi_check``, ``openapi_body``, ``openapi_sample``), and how the destinations are doing
(``destination_status``). The rows are ``ledger.models``' (``outbound``, ``sources``); the admin's
pages are ``ledger.admin.integrations``."""
