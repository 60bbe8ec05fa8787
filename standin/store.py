"""The stand-in's records and the faults a test has asked for, behind one lock: what the HTTP handler
(``standin.server``) reads and writes. Records live in memory, and also in a SQLite file when the
stand-in is given one (``--store``), so they and the id counter outlive a restart. Stdlib only, like
the server."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter, deque
from datetime import UTC, datetime

MAX_BODY_BYTES = 1_000_000


RECORD_FILTERS = ("reference", "idempotency_key")


# Listing: records created in [created_after, created_before), oldest first, a page at a time.
WINDOW_FILTERS = ("created_after", "created_before")


PAGE_PARAMS = ("page_size", "cursor")


DEFAULT_PAGE_SIZE = 100


MAX_PAGE_SIZE = 500


# Which request a fault waits for: "create" = the next POST /records, "lookup" = the next GET /records.
FAULT_TARGETS = ("create", "lookup")


LOOKUP_FAULT_KINDS = (
    "status",
    "reset_before",
    "delay",
    "echo_credential",
)  # drop_after_commit: a lookup commits nothing


class BadRequest(Exception):
    """A request the stand-in refuses; becomes a JSON error answer."""

    def __init__(self, error, detail, *, status=400):
        super().__init__(detail)
        self.error = error
        self.detail = detail
        self.status = status


def validate_fault(fault):
    """Returns (target, normalised copy of one fault), or raises BadRequest saying what is wrong.

    ``target`` is "create" or "lookup" (the fault's ``on``, default "create"); the copy leaves ``on``
    out, since the queue it goes to already says it.
    """
    if not isinstance(fault, dict):
        raise BadRequest("invalid_fault", "each fault must be an object")
    target = fault.get("on", "create")
    if target not in FAULT_TARGETS:
        raise BadRequest("invalid_fault", f"'on' must be one of {FAULT_TARGETS}, not {target!r}")
    kind = fault.get("kind")
    if target == "lookup" and kind == "drop_after_commit":
        raise BadRequest(
            "invalid_fault",
            "drop_after_commit cannot apply to a lookup (a lookup commits nothing); "
            f"lookup faults are {', '.join(LOOKUP_FAULT_KINDS)}",
        )
    return target, _normalised_fault(fault, kind)


def _normalised_fault(fault, kind):
    if kind == "status":
        status = fault.get("status")
        if type(status) is not int or not 400 <= status <= 599:
            raise BadRequest("invalid_fault", "status fault needs an integer 'status' between 400 and 599")
        normalised = {"kind": kind, "status": status}
        if fault.get("retry_after") is not None:
            retry_after = fault["retry_after"]
            if type(retry_after) is not int or retry_after < 0:
                raise BadRequest("invalid_fault", "'retry_after' must be a non-negative integer (seconds)")
            normalised["retry_after"] = retry_after
        # What the refusal says: its code ("error") and words ("detail"), as a vendor's would.
        for name in ("error", "detail"):
            if fault.get(name) is not None:
                if not isinstance(fault[name], str) or not fault[name].strip() or len(fault[name]) > 500:
                    raise BadRequest("invalid_fault", f"'{name}' must be a non-empty string of at most 500 characters")
                normalised[name] = fault[name]
        return normalised
    if kind in ("reset_before", "drop_after_commit"):
        return {"kind": kind}
    if kind == "echo_credential":
        status = fault.get("status", 401)
        if type(status) is not int or not 400 <= status <= 599:
            raise BadRequest("invalid_fault", "echo_credential fault's 'status' must be an integer between 400 and 599")
        return {"kind": kind, "status": status}
    if kind == "delay":
        seconds = fault.get("seconds")
        if type(seconds) not in (int, float) or seconds < 0:
            raise BadRequest("invalid_fault", "delay fault needs a non-negative number 'seconds'")
        return {"kind": kind, "seconds": seconds}
    raise BadRequest("invalid_fault", f"unknown fault kind {kind!r}")


def _canonical(reference, payload):
    return json.dumps({"reference": reference, "payload": payload}, sort_keys=True, separators=(",", ":"))


class RecordFile:
    """The records and the id counter in a SQLite file: each change committed before it is answered,
    so a stand-in restarted on the same file has every record it answered for, and never gives an
    id twice. Used only under the store's lock."""

    def __init__(self, path):
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS records (number INTEGER PRIMARY KEY, record TEXT NOT NULL, body TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS counter (only INTEGER PRIMARY KEY CHECK (only = 1), next_id INTEGER)"
        )
        self._db.execute("INSERT OR IGNORE INTO counter VALUES (1, 1)")

    def load(self):
        """Returns (records in creation order as (record, canonical body), the next id number)."""
        rows = self._db.execute("SELECT record, body FROM records ORDER BY number").fetchall()
        (next_id,) = self._db.execute("SELECT next_id FROM counter").fetchone()
        return [(json.loads(record), body) for record, body in rows], next_id

    def created(self, record, body, next_id):
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT INTO records VALUES (?, ?, ?)", (_number(record), json.dumps(record), body))
            self._db.execute("UPDATE counter SET next_id = ?", (next_id,))

    def changed(self, record):
        self._db.execute("UPDATE records SET record = ? WHERE number = ?", (json.dumps(record), _number(record)))

    def deleted(self, record):
        self._db.execute("DELETE FROM records WHERE number = ?", (_number(record),))

    def cleared(self):
        self._db.execute("DELETE FROM records")

    def close(self):
        self._db.close()


def _number(record):
    return int(record["id"].removeprefix("rec-"))


class Store:
    """All state, in memory, and the records also in ``path`` (a SQLite file) when one is given.
    Every method holds ``lock`` for its whole body, so an idempotency check and the record it
    creates are one step even when requests arrive concurrently."""

    def __init__(self, path=None):
        self.lock = threading.Lock()
        self._file = RecordFile(path) if path else None
        self._next_id = 1
        self._clear()
        if self._file is not None:
            loaded, self._next_id = self._file.load()
            for record, body in loaded:
                self._remember(record, body)

    def _clear(self):
        self._records = {}  # id -> record, in creation order
        self._keys = {}  # idempotency key -> (canonical body, record id)
        self._faults = {target: deque() for target in FAULT_TARGETS}
        self._requests = Counter()
        # The id counter is not reset: an id once given is never given again, so a record id the
        # ledger holds names one record at most, whatever was cleared since.

    def _remember(self, record, body):
        self._records[record["id"]] = record
        if record["idempotency_key"] is not None:
            self._keys[record["idempotency_key"]] = (body, record["id"])

    def reset(self):
        with self.lock:
            self._clear()
            if self._file is not None:
                self._file.cleared()

    def clear_faults(self):
        """Empties both fault queues (records, keys and counters stay); returns how many were dropped."""
        with self.lock:
            dropped = {target: len(queue) for target, queue in self._faults.items()}
            for queue in self._faults.values():
                queue.clear()
            return dropped

    def fault_counts(self):
        with self.lock:
            return {target: len(queue) for target, queue in self._faults.items()}

    def close(self):
        with self.lock:
            if self._file is not None:
                self._file.close()

    def count_request(self, route):
        with self.lock:
            self._requests[route] += 1

    def add_faults(self, faults):
        """Queues (target, fault) pairs, in order; returns the pending faults as pending_faults does."""
        with self.lock:
            for target, fault in faults:
                self._faults[target].append(fault)
            return self._pending()

    def pending_faults(self):
        with self.lock:
            return self._pending()

    def _pending(self):
        # "faults" is the create queue, as it was before lookup faults existed.
        return {"faults": list(self._faults["create"]), "lookup_faults": list(self._faults["lookup"])}

    def next_fault(self, target):
        """Takes the next fault for ``target`` ("create" or "lookup"), or None when that queue is empty."""
        with self.lock:
            queue = self._faults[target]
            return queue.popleft() if queue else None

    def create(self, *, reference, payload, idempotency_key):
        """Returns ("created" | "replayed", record) or ("key_reused", None)."""
        body = _canonical(reference, payload)
        with self.lock:
            if idempotency_key is not None and idempotency_key in self._keys:
                seen_body, record_id = self._keys[idempotency_key]
                if seen_body != body:
                    return "key_reused", None
                return "replayed", self._records[record_id]
            record = {
                "id": f"rec-{self._next_id}",
                "reference": reference,
                "payload": payload,
                "idempotency_key": idempotency_key,
                "created_at": datetime.now(UTC).isoformat(),
            }
            # Written first: a record the file could not take is neither answered for nor kept.
            if self._file is not None:
                self._file.created(record, body, self._next_id + 1)
            self._next_id += 1
            self._remember(record, body)
            return "created", record

    def get(self, record_id):
        with self.lock:
            return self._records.get(record_id)

    def find(self, filters):
        with self.lock:
            return [r for r in self._records.values() if all(r[name] == value for name, value in filters.items())]

    def listing(self, *, created_after, created_before, page_size, cursor):
        """Records created in [created_after, created_before) after the record numbered ``cursor``,
        oldest first, at most ``page_size``; returns (records, next cursor or None)."""
        with self.lock:
            page = []
            for record in self._records.values():
                number = int(record["id"].removeprefix("rec-"))
                created = datetime.fromisoformat(record["created_at"])
                if number <= cursor or not created_after <= created < created_before:
                    continue
                if len(page) == page_size:
                    return page, str(int(page[-1]["id"].removeprefix("rec-")))
                page.append(record)
            return page, None

    def delete(self, record_id):
        """Test control: the record is gone, as if someone removed it at the destination (its
        idempotency key with it, so a request sent again creates a new record)."""
        with self.lock:
            record = self._records.pop(record_id, None)
            if record is not None and record["idempotency_key"] is not None:
                self._keys.pop(record["idempotency_key"], None)
            if record is not None and self._file is not None:
                self._file.deleted(record)
            return record

    def edit(self, record_id, payload):
        """Test control: someone changed the record's payload at the destination."""
        with self.lock:
            record = self._records.get(record_id)
            if record is not None:
                record["payload"] = payload
                if self._file is not None:
                    self._file.changed(record)
            return record

    def stats(self):
        with self.lock:
            return {"records": len(self._records), "requests": dict(self._requests)}
