"""The stand-in keeps its records in a file when given one (``--store``): a stand-in restarted on the
same file has them, answers lookups from them, and gives a new id to the next record, never one it
gave before, a reset included. Faults are scripted state, not records: POST /_faults/clear drops them
and leaves the records."""

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from standin import start_in_thread
from tests.standin.test_process import read_line

ROOT = Path(__file__).resolve().parents[2]


class StandinProcess:
    """``python -m standin --port 0 --store FILE`` as a process of its own, stopped by SIGTERM."""

    def __init__(self, store: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "standin", "--port", "0", "--store", str(store)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = read_line(self.process.stdout, timeout=10)
        assert line.startswith("standin listening on "), line
        self.url = line.split()[-1]
        # Printed right after the ready line (perhaps already buffered with it: no select here).
        assert self.process.stdout.readline().strip() == f"records kept in {store}"
        self.http = httpx.Client(base_url=self.url, timeout=5)

    def stop(self):
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            assert self.process.wait(timeout=10) == 0
        self.process.stdout.close()
        assert self.process.stderr.read() == ""
        self.process.stderr.close()


@pytest.fixture
def store(tmp_path):
    return tmp_path / "standin.sqlite3"


def number(record_id: str) -> int:
    return int(record_id.removeprefix("rec-"))


@pytest.mark.processes
def test_a_restarted_process_keeps_its_records_and_gives_new_ids(store):
    first = StandinProcess(store)
    try:
        made = [
            first.http.post("/records", json={"reference": f"INV-{n}", "payload": {"n": n}}, headers=headers).json()
            for n, headers in [(1, {"Idempotency-Key": "key-1"}), (2, {}), (3, {})]
        ]
        first.http.post("/_delete", json={"id": made[2]["id"]}).raise_for_status()
        first.http.post("/_edit", json={"id": made[1]["id"], "payload": {"n": 20}}).raise_for_status()
    finally:
        first.stop()

    second = StandinProcess(store)
    try:
        kept = second.http.get("/records").json()["records"]
        assert [(r["id"], r["reference"], r["payload"]) for r in kept] == [
            (made[0]["id"], "INV-1", {"n": 1}),
            (made[1]["id"], "INV-2", {"n": 20}),  # the edit was kept, the deleted record stays gone
        ]
        # The idempotency key is remembered: the same request is a replay, a different one refused.
        again = second.http.post(
            "/records", json={"reference": "INV-1", "payload": {"n": 1}}, headers={"Idempotency-Key": "key-1"}
        )
        assert (again.status_code, again.json()["id"]) == (200, made[0]["id"])
        reused = second.http.post(
            "/records", json={"reference": "X", "payload": {}}, headers={"Idempotency-Key": "key-1"}
        )
        assert reused.status_code == 422
        # The next id is new: after the deleted rec-3 too.
        new = second.http.post("/records", json={"reference": "INV-4", "payload": {}}).json()
        assert number(new["id"]) == number(made[2]["id"]) + 1
    finally:
        second.stop()


def test_a_reset_clears_the_file_but_not_the_id_counter(store):
    server, url = start_in_thread(store_path=store)
    with httpx.Client(base_url=url, timeout=5) as http:
        before = http.post("/records", json={"reference": "A", "payload": {}}).json()["id"]
        http.post("/_reset").raise_for_status()
    server.shutdown()

    server, url = start_in_thread(store_path=store)
    try:
        with httpx.Client(base_url=url, timeout=5) as http:
            assert http.get("/records").json()["records"] == []
            after = http.post("/records", json={"reference": "A", "payload": {}}).json()["id"]
            assert number(after) == number(before) + 1
    finally:
        server.shutdown()


def test_an_unusable_store_file_is_one_line_and_status_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "standin", "--port", "0", "--store", str(tmp_path / "no-such-folder" / "s.sqlite3")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("standin: cannot use the record file "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_clearing_faults_drops_both_queues_and_keeps_the_records(http):
    created = http.post("/records", json={"reference": "A", "payload": {}}).json()
    faults = [
        {"kind": "status", "status": 503},
        {"kind": "reset_before"},
        {"on": "lookup", "kind": "status", "status": 503},
    ]
    http.post("/_faults", json={"faults": faults}).raise_for_status()
    assert http.get("/_faults/count").json() == {"create": 2, "lookup": 1}

    cleared = http.post("/_faults/clear")

    assert cleared.json() == {"ok": True, "dropped": {"create": 2, "lookup": 1}}
    assert http.get("/_faults/count").json() == {"create": 0, "lookup": 0}
    assert http.get("/_faults").json() == {"faults": [], "lookup_faults": []}
    assert http.get(f"/records/{created['id']}").status_code == 200  # the records stay
    assert http.post("/records", json={"reference": "B", "payload": {}}).status_code == 201  # no fault left


def test_clearing_faults_takes_only_post(http):
    assert http.get("/_faults/clear").status_code == 405
    assert http.post("/_faults/count").status_code == 405
