"""The callers of ``bench/claims_crash.py``: each a process of its own, so that one can be SIGKILLed.

    python -m bench.crash_callers ours --api URL --token T --standin URL --envelope JSON --lease 5 [--hang]
    python -m bench.crash_callers powertools --redis URL --prefix P --standin URL --envelope JSON \
        --expiry in-progress|record --seconds 5 [--hang]

Each does what an automation does with its idempotency layer: reserve, perform the effect at the
destination (``POST {standin}/records``), report. ``--hang`` is the crash: after the effect the caller
prints ``acted`` and waits to be killed, so it never reports. Without it, it is the retry: an answer
that says "someone holds it" is waited out (``Retry-After``, as a caller should) until the layer
decides: act, or not.

Neither caller sends an ``Idempotency-Key`` to the destination: the destination here is one that
does not honour one (the withdrawal of powertools-lambda-python#8049), so what it holds shows only
whether the layer let the action run again. Every step is one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import httpx

RETRY_DEADLINE = 60.0  # seconds a retry keeps waiting out "someone holds it" before giving up


def say(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def perform(standin: str, envelope: dict, caller: str) -> str:
    """The side effect: one record at the destination."""
    data = envelope["data"]
    answer = httpx.post(
        f"{standin}/records",
        json={"reference": data["request_id"], "payload": {"caller": caller, "amount_cents": data["amount_cents"]}},
        timeout=10,
    )
    answer.raise_for_status()
    return answer.json()["id"]


def hang_until_killed() -> None:
    while True:
        time.sleep(3600)


# --- opsconsole: POST /api/v1/claims, the effect, POST /outcome ------------------------------------------


def ours(args) -> None:
    envelope = json.loads(args.envelope)
    body = {**envelope, "lease_seconds": args.lease}
    deadline = time.monotonic() + RETRY_DEADLINE
    with httpx.Client(base_url=args.api, headers={"Authorization": f"Bearer {args.token}"}, timeout=30) as http:
        while True:
            answer = http.post("/api/v1/claims", json=body)
            found = answer.json()
            say("answer", http=answer.status_code, status=found.get("status"), key=found.get("key"))
            if found.get("status") in ("in_progress", "retry_later") and time.monotonic() < deadline:
                time.sleep(float(answer.headers.get("Retry-After", 1)))
                continue
            break
        if answer.status_code != 201:
            say("not_acted", status=found.get("status"))
            return
        record = perform(args.standin, envelope, "opsconsole")
        say("acted", record=record)
        if args.hang:
            hang_until_killed()
        report = {"token": found["token"], "outcome": "succeeded", "external_id": record, "result": {"record": record}}
        recorded = http.post(f"/api/v1/claims/{found['key']}/outcome", json=report)
        say("reported", http=recorded.status_code, status=recorded.json().get("status"))


# --- Powertools: idempotent_function around the effect ------------------------------------------------


class LambdaTimeout:
    """What Powertools reads from a Lambda context: the time left before the function is stopped. It
    sets the in-progress record's expiry to now + this (a Lambda's timeout, here ``--seconds``)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def powertools(args) -> None:
    import warnings

    import redis
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
    from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

    warnings.filterwarnings("ignore", message=".*remaining time.*")
    # The Redis layer (CachePersistenceLayer is the name 3.x documents) warns of its 4.0 rename.
    warnings.filterwarnings("ignore", message="RedisCachePersistenceLayer will be removed", category=DeprecationWarning)
    envelope = json.loads(args.envelope)
    options = {"event_key_jmespath": "[action, data.request_id, data.version]"}
    if args.expiry == "in-progress":
        options["lambda_context"] = LambdaTimeout(args.seconds)  # the record itself is kept an hour (default)
    else:
        options["expires_after_seconds"] = args.seconds  # no Lambda context: the record's own expiry
    layer = CachePersistenceLayer(client=redis.Redis.from_url(args.redis))

    @idempotent_function(
        data_keyword_argument="event",
        persistence_store=layer,
        config=IdempotencyConfig(**options),
        key_prefix=args.prefix,
    )
    def send_invoice(event: dict) -> dict:
        say("answer", status="running")  # idempotent_function let it run
        record = perform(args.standin, event, "powertools")
        say("acted", record=record)
        if args.hang:
            hang_until_killed()
        return {"record": record}

    deadline = time.monotonic() + RETRY_DEADLINE
    while True:
        try:
            result = send_invoice(event=envelope)
        except IdempotencyAlreadyInProgressError:
            say("answer", status="in_progress")
            if time.monotonic() < deadline:
                time.sleep(1)  # Powertools gives no Retry-After; a redelivery comes later
                continue
            raise
        say("done", result=result)
        return


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.crash_callers")
    sides = parser.add_subparsers(dest="side", required=True)
    ours_args = sides.add_parser("ours")
    ours_args.add_argument("--api", required=True)
    ours_args.add_argument("--token", required=True)
    ours_args.add_argument("--lease", type=int, default=5)
    peer_args = sides.add_parser("powertools")
    peer_args.add_argument("--redis", required=True)
    peer_args.add_argument("--prefix", required=True)
    peer_args.add_argument("--expiry", choices=("in-progress", "record"), required=True)
    peer_args.add_argument("--seconds", type=int, default=5)
    for side in (ours_args, peer_args):
        side.add_argument("--standin", required=True)
        side.add_argument("--envelope", required=True)
        side.add_argument("--hang", action="store_true")
    args = parser.parse_args(argv)
    (ours if args.side == "ours" else powertools)(args)


if __name__ == "__main__":
    main(sys.argv[1:])
