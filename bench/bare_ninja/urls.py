"""The bare ninja service's one endpoint: ``POST /api/events`` writes one operation-shaped row with
one raw ``INSERT .. ON CONFLICT DO NOTHING``, in autocommit (Django's default: one commit).

The row is ``ledger_operation``'s shape: the bench copies one real operation row into
``bench_bare_template`` and creates ``bench_bare_operation`` ``LIKE ledger_operation INCLUDING ALL``
(the same columns, defaults, checks and indexes; no foreign keys), as scenario 1's raw INSERT does.
Each worker reads the template once; a request fills in its action, key, payload, correlation id
and times from the envelope. The envelope is a ninja ``Schema`` (parsed and validated by ninja, as
any ninja endpoint would take a body). ``GET /api/health`` answers once the server serves.
"""

import json
from functools import cache
from typing import Any

from django.db import connection
from django.urls import path
from django.utils import timezone
from ninja import NinjaAPI, Schema

api = NinjaAPI(docs_url=None, openapi_url=None)

TEMPLATE_TABLE = "bench_bare_template"
TABLE = "bench_bare_operation"


class Envelope(Schema):
    action: str
    delivery_id: str
    data: dict[str, Any]


@cache
def insert_statement() -> tuple[str, dict]:
    """The INSERT of this table's columns and the template row's values (read once per worker)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {TEMPLATE_TABLE} LIMIT 1")  # the bench's own table
        values = cursor.fetchone()
        columns = [column.name for column in cursor.description]
    template = {name: value for name, value in zip(columns, values, strict=True) if name != "id"}
    statement = (
        f"INSERT INTO {TABLE} ({', '.join(template)}) VALUES ({', '.join(['%s'] * len(template))}) "
        "ON CONFLICT DO NOTHING"
    )
    return statement, template


@api.post("/events", response={200: dict, 201: dict})
def submit(request, envelope: Envelope):
    statement, template = insert_statement()
    now = timezone.now()
    key = f"{envelope.action}:{envelope.data.get('request_id')}:{envelope.data.get('version')}"
    row = template | {
        "action": envelope.action,
        "key": key,
        "payload": json.dumps(envelope.data),
        "correlation_id": envelope.delivery_id,
        "created_at": now,
        "updated_at": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(statement, list(row.values()))
        inserted = cursor.rowcount
    if inserted:
        return 201, {"status": "accepted", "key": key}
    return 200, {"status": "duplicate", "key": key}


@api.get("/health")
def health(request):
    return {"ok": True}


urlpatterns = [path("api/", api.urls)]
