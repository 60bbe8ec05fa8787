"""A process that claims through the Python client (clients/python), for test_claims_processes.py:
another program than the test, as a flow's script would be. It imports the client and httpx only.

The workspace's API token comes in the environment, OPSCONSOLE_TOKEN.

    python tests/faults/claimer.py race URL DATA_JSON CLAIMERS
        CLAIMERS threads claim the same operation at once; the one told to act waits until every
        other has its answer, then reports success; then CLAIMERS threads claim it again. Prints
        one JSON line: every answer of both rounds.
    python tests/faults/claimer.py crash URL DATA_JSON STANDIN_URL
        Claims with a 5 s lease, creates the record at the stand-in (with the claim's idempotency
        key), prints "acted RECORD_ID" and waits, in its block, for the SIGKILL.
    python tests/faults/claimer.py vanish URL DATA_JSON STANDIN_URL
        Claims with a 5 s lease, prints "claimed KEY" and waits, in its block, for the SIGKILL,
        never having acted.

The action is the demo's `send-invoice`, declared in its integrations file (examples/integrations.yaml).
"""

import json
import os
import sys
import threading
import time

import httpx
from opsconsole_claims import Ledger

ACTION = "send-invoice"


def race(url: str, token: str, data: dict, claimers: int) -> None:
    answered = threading.Barrier(claimers)
    start = threading.Barrier(claimers)

    def first_round(ledger: Ledger) -> dict:
        start.wait(timeout=30)
        with ledger.claim(ACTION, data, lease_seconds=30) as claim:
            answered.wait(timeout=60)  # the winner holds its lease until everyone was answered
            if claim.should_act:
                claim.succeeded(external_id="rec-race", result={"invoice": "INV-1", "by": threading.get_ident()})
        # The claim's answer, and what the operation became after the winner's report.
        return {"status": claim.answer["status"], "http": claim.http_status, "after": claim.status}

    def second_round(ledger: Ledger) -> dict:
        start.wait(timeout=30)
        claim = ledger.claim(ACTION, data, lease_seconds=30)
        return {
            "status": claim.status,
            "http": claim.http_status,
            "result": claim.result,
            "external_id": claim.external_id,
        }

    answers = {}
    for name, round_ in (("first", first_round), ("later", second_round)):
        answers[name] = in_threads(url, token, claimers, round_)
    print(json.dumps(answers), flush=True)


def in_threads(url: str, token: str, count: int, claimer) -> list[dict]:
    """Each claimer on its own thread with its own client (its own connection)."""
    answers: list[dict] = []

    def run() -> None:
        with Ledger(url, token, timeout=30, backoff=0.2) as ledger:
            answer = claimer(ledger)
        answers.append(answer)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return answers


def crash(url: str, token: str, data: dict, standin_url: str) -> None:
    with Ledger(url, token) as ledger, ledger.claim(ACTION, data, lease_seconds=5) as claim:
        assert claim.should_act, f"the claimer was answered {claim.status}"
        payload = {key: data[key] for key in ("customer_id", "amount_cents", "currency")}
        created = httpx.post(
            f"{standin_url}/records",
            json={"reference": claim.key, "payload": payload},
            headers={"Idempotency-Key": claim.idempotency_key},
            timeout=5,
        )
        created.raise_for_status()
        claim.acted()
        print(f"acted {created.json()['id']}", flush=True)
        time.sleep(120)  # killed here, before any report


def vanish(url: str, token: str, data: dict) -> None:
    with Ledger(url, token) as ledger, ledger.claim(ACTION, data, lease_seconds=5) as claim:
        assert claim.should_act, f"the claimer was answered {claim.status}"
        print(f"claimed {claim.key}", flush=True)
        time.sleep(120)  # killed here, before acting


if __name__ == "__main__":
    mode, url, data, last = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    token = os.environ["OPSCONSOLE_TOKEN"]
    if mode == "race":
        race(url, token, data, int(last))
    elif mode == "vanish":
        vanish(url, token, data)
    else:
        crash(url, token, data, last)
