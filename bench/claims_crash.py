"""``make bench-claims-crash``: a caller killed after its effect and before its report, then a
retry, through opsconsole's claims and through Powertools' ``idempotent_function``, side by side.

    make bench-claims-crash
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole .venv/bin/python bench/claims_crash.py

Real processes throughout: the stand-in destination (``python -m standin``), gunicorn on PostgreSQL
(a scratch database beside ``DATABASE_URL``, dropped at the end), and every caller
(``bench/crash_callers.py``). For each side:

1. a first caller reserves the operation (a 5 s lease; a 5 s in-progress or record expiry), creates
   its record at the stand-in, and is SIGKILLed before it reports;
2. a second caller, started at once, retries the same operation: it waits out "someone holds it"
   (``409 in_progress`` with ``Retry-After``; Powertools' ``IdempotencyAlreadyInProgressError``) until
   the layer decides;
3. the stand-in is asked how many records the operation has, and how many creates it received.

opsconsole: the expired lease makes the operation ``unknown`` (the caller may have acted), the retry is
answered ``409 unknown`` and does not act: one record. Then a person resolves it from the command line
(``manage.py resolve`` with the record found) and a third caller is answered ``200 done``.
Powertools, twice: with a Lambda-style in-progress expiry (the function's 5 s timeout, read from the
context; the record is kept an hour) and with ``expires_after_seconds=5`` and no context: the
retry finds the record expired and runs the function again: two records.

``CRASH_SECONDS`` (5) is the lease and both expiries; ``BENCH_REDIS_URL`` (db 15) serves Powertools
under a key prefix of its own, deleted at the end; ``BENCH_RESULTS=file.json`` writes what was seen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import PROJECT_DIR, env_int, run_in_scratch_database
from bench.run import _git_revision

SECONDS = env_int("CRASH_SECONDS", 5)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
WORKSPACE = "bench-crash"
REVIEWER = "bench-reviewer"


def envelope(tag: str) -> dict:
    return {
        "action": "send-invoice",
        "delivery_id": f"{tag}-d1",
        "data": {"request_id": tag, "version": 1, "customer_id": "cus-1", "amount_cents": 4200, "currency": "EUR"},
    }


# --- processes --------------------------------------------------------------------------------------


class Standin:
    """``python -m standin --port 0``: the destination, a process of its own."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "standin", "--port", "0"],
            cwd=PROJECT_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        line = self.process.stdout.readline().strip()
        if not line.startswith("standin listening on "):
            self.stop()
            raise RuntimeError(f"the stand-in did not start: {line!r}")
        self.url = line.removeprefix("standin listening on ")

    def records(self, reference: str) -> list[dict]:
        import httpx

        return httpx.get(f"{self.url}/records", params={"reference": reference}, timeout=10).json()["records"]

    def creates(self) -> int:
        import httpx

        return httpx.get(f"{self.url}/_stats", timeout=10).json()["requests"].get("POST /records", 0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Caller:
    """One ``python -m bench.crash_callers`` process; its JSON lines are read as they come."""

    def __init__(self, arguments: list[str]):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.crash_callers", *arguments],
            cwd=PROJECT_DIR,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.events: list[dict] = []

    def read_until(self, event: str | None, *, timeout: float) -> None:
        """Read lines until one with ``event`` (or, with None, until the process exits)."""
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            self.events.append(json.loads(line))
            if event is not None and self.events[-1]["event"] == event:
                return
            if time.monotonic() > deadline:
                break
        if event is not None:
            self.kill()
            raise RuntimeError(f"the caller ended or timed out before {event!r}: {self.events}")
        self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        if self.process.returncode != 0:
            raise RuntimeError(f"the caller exited with {self.process.returncode}: {self.events}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def crash_then_retry(arguments: list[str], standin: Standin, reference: str) -> dict:
    """The first caller acts and is SIGKILLed before reporting; a second retries at once."""
    creates_before = standin.creates()
    first = Caller([*arguments, "--hang"])
    try:
        first.read_until("acted", timeout=60)
    finally:
        first.kill()
    killed = time.monotonic()
    retry = Caller(arguments)
    try:
        retry.read_until(None, timeout=SECONDS + 60)
    finally:
        retry.kill()
    return {
        "first caller": first.events,
        "retry": retry.events,
        "retry decided after s": round(time.monotonic() - killed, 1),
        "retry acted": any(event["event"] == "acted" for event in retry.events),
        "records at the destination": len(standin.records(reference)),
        "creates received": standin.creates() - creates_before,
    }


# --- the sides --------------------------------------------------------------------------------------


def opsconsole_side(server_url: str, token: str, standin: Standin) -> dict:
    from ledger.models import Operation

    tag = f"crash-ours-{uuid.uuid4().hex[:6]}"
    body = json.dumps(envelope(tag))
    arguments = ["ours", "--api", server_url, "--token", token, "--standin", standin.url, "--envelope", body]
    found = crash_then_retry([*arguments, "--lease", str(SECONDS)], standin, tag)
    key = next(event["key"] for event in found["first caller"] if event.get("key"))
    operation = Operation.objects.get(key=key)
    found["state after the retry"] = operation.state
    found["audit kinds"] = list(operation.audit_events.order_by("id").values_list("kind", flat=True))
    found["person resolves"] = resolve_from_command_line(key, standin.records(tag)[0]["id"])
    later = Caller(arguments)
    later.read_until(None, timeout=60)
    found["claim after resolving"] = answers_of(later.events)
    found["records at the end"] = len(standin.records(tag))
    return found


def resolve_from_command_line(key: str, record_id: str) -> str:
    """What a person does once they found the record: ``manage.py resolve`` (the console's Mark succeeded)."""
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "resolve",
            key,
            "--workspace",
            WORKSPACE,
            "--as",
            REVIEWER,
            "--reason",
            "found at the destination after the caller crashed",
            "--external-id",
            record_id,
        ],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py resolve failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def powertools_side(expiry: str, standin: Standin, prefix: str) -> dict:
    tag = f"crash-pt-{expiry}-{uuid.uuid4().hex[:6]}"
    arguments = [
        "powertools",
        "--redis",
        REDIS_URL,
        "--prefix",
        prefix,
        "--expiry",
        expiry,
        "--seconds",
        str(SECONDS),
        "--standin",
        standin.url,
        "--envelope",
        json.dumps(envelope(tag)),
    ]
    return crash_then_retry(arguments, standin, tag)


# --- the report -------------------------------------------------------------------------------------


def summarise_answers(answers: list[str]) -> str:
    """["in_progress", "in_progress", "unknown"] -> "in_progress x2, then unknown"."""
    if not answers:
        return "-"
    *waiting, last = answers
    if not waiting:
        return last
    counts = {answer: waiting.count(answer) for answer in dict.fromkeys(waiting)}
    return ", ".join(f"{answer} x{count}" for answer, count in counts.items()) + f", then {last}"


def answers_of(events: list[dict]) -> list[str]:
    """What the layer told a caller, in order ("409 unknown"; Powertools' "running": it let the function run)."""
    return [" ".join(str(e[k]) for k in ("http", "status") if k in e) for e in events if e["event"] == "answer"]


def table(sides: dict[str, dict]) -> list[str]:
    names = list(sides)
    lines = [
        ("retry answered", [summarise_answers(answers_of(s["retry"])) for s in sides.values()]),
        ("retry decided, s after the kill", [str(s["retry decided after s"]) for s in sides.values()]),
        ("retry ran the action again", ["yes" if s["retry acted"] else "no" for s in sides.values()]),
        ("creates received by the destination", [str(s["creates received"]) for s in sides.values()]),
        ("records at the destination", [str(s["records at the destination"]) for s in sides.values()]),
        (
            "then a person resolves (manage.py resolve): the next claim",
            [summarise_answers(s.get("claim after resolving", [])) for s in sides.values()],
        ),
    ]
    out = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    out += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in lines]
    return out


def run(label: str) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from ledger.core import accounts
    from tests.configured import apply_send_invoice
    from tests.faults.gunicorn import running_gunicorn

    call_command("migrate", verbosity=0)
    workspace, token = accounts.create_workspace(slug=WORKSPACE, approved_owners=["ops"], actor="bench")
    reviewer = get_user_model().objects.create_user(REVIEWER)
    accounts.set_membership(workspace=workspace, user=reviewer, role="operator", actor="bench")
    prefix = f"opsconsole-bench-crash-{uuid.uuid4().hex[:8]}"
    print(f"database: {label}; lease and expiries {SECONDS} s; Powertools on {REDIS_URL}", flush=True)
    standin = Standin()
    # The demo's send-invoice, from its integrations file, looked up at this stand-in.
    apply_send_invoice(standin.url)
    sides: dict[str, dict] = {}
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    try:
        with running_gunicorn(log_dir, env={"OPSCONSOLE_STANDIN_URL": standin.url}) as server:
            sides["opsconsole claims"] = opsconsole_side(server.url, token, standin)
        sides["Powertools, in-progress expiry (5 s Lambda timeout)"] = powertools_side("in-progress", standin, prefix)
        sides["Powertools, expires_after_seconds=5"] = powertools_side("record", standin, prefix)
    finally:
        standin.stop()
        from bench.scenario_claims import forget_keys

        forget_keys(REDIS_URL, prefix)

    ours = sides["opsconsole claims"]
    print("\nEvery caller's lines:")
    for name, side in sides.items():
        print(f"  {name}:\n    first caller: {side['first caller']}\n    retry: {side['retry']}")
    print(
        f"\nopsconsole after the retry: state {ours['state after the retry']}; audit {ours['audit kinds']}\n"
        f"a person resolves: {ours['person resolves']}\n"
        f"the next claim: {summarise_answers(ours['claim after resolving'])}; "
        f"records at the end: {ours['records at the end']}"
    )
    print("\nA caller SIGKILLed after its effect, before its report; a second caller retries:\n")
    print("\n".join(table(sides)))
    if results := os.environ.get("BENCH_RESULTS"):
        Path(results).write_text(
            json.dumps(
                {
                    "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    "revision": os.environ.get("BENCH_REVISION") or _git_revision(),
                    "lease and expiry seconds": SECONDS,
                    "sides": sides,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"written to {results}")


if __name__ == "__main__":
    run_in_scratch_database("claims_crash", run, keep=False)
