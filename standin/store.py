"""The stand-in's records and the faults a test has asked for, in memory, behind one lock: what the
HTTP handler (``standin.server``) reads and writes. Stdlib only, like the server."""

from __future__ import annotations

import json
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


class Store:
    """All in-memory state. Every method holds ``lock`` for its whole body, so an idempotency
    check and the record it creates are one step even when requests arrive concurrently."""

    def __init__(self):
        self.lock = threading.Lock()
        self._clear()

    def _clear(self):
        self._records = {}  # id -> record, in creation order
        self._keys = {}  # idempotency key -> (canonical body, record id)
        self._faults = {target: deque() for target in FAULT_TARGETS}
        self._requests = Counter()
        self._next_id = 1

    def reset(self):
        with self.lock:
            self._clear()

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
            self._next_id += 1
            self._records[record["id"]] = record
            if idempotency_key is not None:
                self._keys[idempotency_key] = (body, record["id"])
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
            return record

    def edit(self, record_id, payload):
        """Test control: someone changed the record's payload at the destination."""
        with self.lock:
            record = self._records.get(record_id)
            if record is not None:
                record["payload"] = payload
            return record

    def stats(self):
        with self.lock:
            return {"records": len(self._records), "requests": dict(self._requests)}
