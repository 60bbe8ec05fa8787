"""The Powertools peer of the claims round trip (bench/scenario_claims.py) and of the batch of
scenario 2 (bench/scenario_intake.py), served by gunicorn as opsconsole is.

    gunicorn -c opsconsole/gunicorn.conf.py bench.powertools_server:app

A bare WSGI application (no framework, no authentication: the least a service can do per request),
so the comparison is ours over the same HTTP server against the cheapest Powertools service there is.
Two shapes, each with its own key prefix (a persistence layer is configured once, for one shape):

- ``POST /powertools/operations`` (the envelope): the handler is wrapped in ``idempotent_function``,
  which writes the in-progress record, runs the effect (none here) and writes the completed record:
  one request per operation, as a Lambda using Powertools does it.
- ``POST /powertools/claims`` (the envelope) then ``POST /powertools/claims/{key}/outcome``
  (``{"data": envelope, "result": ...}``): the same two records, written by the persistence layer's
  ``save_inprogress`` and ``save_success`` (what ``idempotent_function`` calls around the function),
  one request each: the endpoint shape of ``POST /api/v1/claims`` and ``/outcome``.
- ``POST /powertools/events/batch`` (``{"events": [envelope, ...]}``): each event through the
  ``idempotent_function`` above, one after another, each answered in ``results`` (its
  ``http_status`` and what the function returned, or the stored result of a key seen before): the
  endpoint shape of ``POST /api/v1/events/batch``.

Environment: ``POWERTOOLS_REDIS_URL`` (the Redis), ``POWERTOOLS_KEY_PREFIX`` (every key starts with it,
so the harness can delete them). Each gunicorn worker imports this module after the fork (no
preload), so each has its own Redis connection pool.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import warnings
from types import SimpleNamespace

import redis

# Outside Lambda there is no remaining time to derive an in-progress expiry from; Powertools warns
# on every claim. The record's own expiry (expires_after_seconds) still applies.
warnings.filterwarnings("ignore", message=".*remaining time.*")
# The Redis layer (CachePersistenceLayer is the name 3.x documents) warns of its 4.0 rename.
warnings.filterwarnings("ignore", message="RedisCachePersistenceLayer will be removed", category=DeprecationWarning)

PREFIX = os.environ.get("POWERTOOLS_KEY_PREFIX", "opsconsole-bench-powertools")


@functools.cache
def service() -> SimpleNamespace:
    """The persistence layers and the decorated function, built once per process. Powertools is
    bench-only (requirements-bench.txt): imported here, so that this module imports without it
    (tests/test_bench_scripts.py); a worker builds it as it boots (below), not at a measured request."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemAlreadyExistsError
    from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

    config = IdempotencyConfig(event_key_jmespath="[action, data.request_id, data.version]")
    client = redis.Redis.from_url(os.environ.get("POWERTOOLS_REDIS_URL", "redis://127.0.0.1:6379/15"))
    split_layer = CachePersistenceLayer(client=client)
    split_layer.configure(config, key_prefix=f"{PREFIX}-split")
    perform = idempotent_function(
        data_keyword_argument="event",
        persistence_store=CachePersistenceLayer(client=client),
        config=config,
        key_prefix=f"{PREFIX}-fn",
    )(_perform)
    return SimpleNamespace(perform=perform, split_layer=split_layer, exists=IdempotencyItemAlreadyExistsError)


def _perform(event: dict) -> dict:
    return {"status": "succeeded", "request_id": event["data"]["request_id"]}


def operation(body: dict) -> tuple[str, dict]:
    return "200 OK", {"status": "done", "result": service().perform(event=body)}


def batch(body: dict) -> tuple[str, dict]:
    perform = service().perform
    results = []
    for event in body["events"]:
        result = perform(event=event)
        results.append({"http_status": 201, "status": result["status"], "request_id": result["request_id"]})
    return "200 OK", {"results": results}


def claim(body: dict) -> tuple[str, dict]:
    powertools = service()
    try:
        powertools.split_layer.save_inprogress(data=body)
    except powertools.exists:
        return "409 Conflict", {"status": "exists"}
    return "201 Created", {"status": "claimed", "key": powertools.split_layer._get_hashed_idempotency_key(data=body)}


def outcome(body: dict) -> tuple[str, dict]:
    service().split_layer.save_success(data=body["data"], result=body["result"])
    return "200 OK", {"status": "recorded"}


def route(method: str, path: str):
    if method != "POST":
        return None
    if path == "/powertools/operations":
        return operation
    if path == "/powertools/events/batch":
        return batch
    if path == "/powertools/claims":
        return claim
    if path.startswith("/powertools/claims/") and path.endswith("/outcome"):
        return outcome
    return None


def app(environ, start_response):
    handler = route(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))
    if environ.get("PATH_INFO") == "/health":
        status, answer = "200 OK", {"ok": True}
    elif handler is None:
        status, answer = "404 Not Found", {"status": "not_found"}
    else:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        status, answer = handler(json.loads(environ["wsgi.input"].read(length)))
    body = json.dumps(answer).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


# Served, Powertools is there: each gunicorn worker builds the service as it imports this module (after
# the fork, no preload), so no worker's first measured request pays for it.
if importlib.util.find_spec("aws_lambda_powertools") is not None:
    service()
