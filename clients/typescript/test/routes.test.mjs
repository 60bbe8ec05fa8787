// Events, batches, due work and the management routes: each method's request, its answer's body,
// and a refusal thrown typed.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { Opsconsole, Refused } from "opsconsole-client";
import { KEY, KEY_PATH, fakeServer } from "./fake-server.mjs";

let server;
let ops;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
  ops = new Opsconsole({ baseUrl: `${server.url}/api/v1/`, token: "oc_test", backoffMs: 1 });
});

describe("events", () => {
  it("submitEvent answers accepted, duplicate and blocked payload_conflict; other refusals throw", async () => {
    const event = { action: "send-invoice", data: { request_id: "INV-7" }, delivery_id: "d-1" };
    server.on("POST /api/v1/events", { status: 201, body: { status: "accepted", key: KEY } }, { status: 200, body: { status: "duplicate" } }, {
      status: 409,
      body: { status: "blocked", reason: "payload_conflict", conflict_id: 3 },
    }, { status: 422, body: { status: "blocked", reason: "invalid_input", errors: [{ field: "data" }] } });
    assert.deepEqual(await ops.submitEvent(event), { httpStatus: 201, status: "accepted", body: { status: "accepted", key: KEY } });
    assert.equal((await ops.submitEvent(event)).status, "duplicate");
    const conflict = await ops.submitEvent(event);
    assert.deepEqual([conflict.httpStatus, conflict.body.reason], [409, "payload_conflict"]);
    await assert.rejects(ops.submitEvent(event), (error) => error instanceof Refused && error.reason === "invalid_input");
    assert.deepEqual(server.requests[0].body, event);
  });

  it("submitBatch sends the events and answers their results", async () => {
    server.on("POST /api/v1/events/batch", { status: 200, body: { status: "ok", results: [{ index: 0, status: "accepted" }] } });
    const answer = await ops.submitBatch([{ action: "send-invoice", data: { request_id: "INV-7" } }]);
    assert.equal(answer.body.results[0].status, "accepted");
    assert.deepEqual(server.requests[0].body, { events: [{ action: "send-invoice", data: { request_id: "INV-7" } }] });
  });
});

describe("due work and management", () => {
  it("due() sends its filters as the query", async () => {
    server.on("GET /api/v1/claims/due", { status: 200, body: { status: "ok", operations: [{ key: KEY }], next_cursor: null } });
    const page = await ops.due({ action: "send-invoice", limit: 50 });
    assert.equal(page.operations[0].key, KEY);
    assert.equal(server.requests[0].query.get("action"), "send-invoice");
    assert.equal(server.requests[0].query.get("limit"), "50");
    assert.equal(server.requests[0].query.has("cursor"), false);
  });

  it("every operation route percent-encodes the key as one segment and sends its body", async () => {
    const key = "acme:R/7?#%:v1:issue-refund";
    const path = `/api/v1/operations/${encodeURIComponent(key)}`;
    for (const what of ["approve", "reject", "replay", "resolve", "cancel", "take", "release"]) {
      server.on(`POST ${path}/${what}`, { status: 200, body: { status: what } });
    }
    server.on(`GET ${path}`, { status: 200, body: { key } });
    assert.equal((await ops.operation(key)).key, key);
    await ops.approve(key, { fingerprint: "9f2c", reason: "matches" });
    await ops.reject(key, { fingerprint: "9f2c", reason: "duplicate" });
    await ops.replay(key, { reason: "fixed" });
    await ops.resolve(key, { externalId: "rec_81", note: "seen" });
    await ops.cancel(key, { reason: "by mistake" });
    await ops.take(key, { takeOver: true });
    await ops.release(key);
    assert.deepEqual(
      server.requests.map((request) => [request.rawPath, request.body]),
      [
        [path, undefined],
        [`${path}/approve`, { fingerprint: "9f2c", reason: "matches" }],
        [`${path}/reject`, { fingerprint: "9f2c", reason: "duplicate" }],
        [`${path}/replay`, { reason: "fixed" }],
        [`${path}/resolve`, { external_id: "rec_81", note: "seen" }],
        [`${path}/cancel`, { reason: "by mistake" }],
        [`${path}/take`, { take_over: true }],
        [`${path}/release`, undefined],
      ],
    );
  });

  it("operations(filters), conflicts, pauses", async () => {
    server.on("GET /api/v1/operations", { status: 200, body: { operations: [], next_cursor: null } });
    server.on("POST /api/v1/conflicts/17/apply", { status: 200, body: { status: "applied" } });
    server.on("POST /api/v1/conflicts/18/dismiss", { status: 200, body: { status: "dismissed" } });
    server.on("GET /api/v1/pauses", { status: 200, body: { pauses: [] } });
    server.on("POST /api/v1/pauses", { status: 201, body: { pauses: [{ id: 7 }] } });
    server.on("DELETE /api/v1/pauses/7", { status: 200, body: { status: "resumed" } });
    await ops.operations({ state: "pending_approval", action: "issue-refund", limit: 20 });
    assert.equal(server.requests[0].query.get("state"), "pending_approval");
    assert.equal((await ops.applyConflict(17, { reason: "meant" })).status, "applied");
    assert.equal((await ops.dismissConflict(18, { reason: "old" })).status, "dismissed");
    assert.deepEqual(await ops.pauses(), { pauses: [] });
    assert.equal((await ops.pause({ scope: "action", action: "send-invoice", reason: "INC-42" })).pauses[0].id, 7);
    assert.equal((await ops.resume(7)).status, "resumed");
    assert.throws(() => ops.resume(1.5), /integer/);
  });

  it("a refusal throws Refused with the answer", async () => {
    server.on(`POST /api/v1/operations/${KEY_PATH}/approve`, { status: 403, body: { status: "four_eyes", message: "you asked for it" } });
    const error = await ops.approve(KEY, { fingerprint: "x" }).catch((error) => error);
    assert.ok(error instanceof Refused);
    assert.deepEqual([error.httpStatus, error.status], [403, "four_eyes"]);
    assert.match(error.message, /403 four_eyes: you asked for it/);
    assert.equal(server.requests[0].rawPath, `/api/v1/operations/${KEY_PATH}/approve`);
  });
});

describe("claim batch", () => {
  it("claimBatch sends each item as the single routes take it and answers a Claim or a Refused per item", async () => {
    server.on("POST /api/v1/claims/batch", {
      status: 200,
      body: {
        status: "ok",
        results: [
          { index: 0, http_status: 201, status: "claimed", key: KEY, token: "t-1", attempt: 1, idempotency_key: "idem-1", lease_expires_at: new Date(Date.now() + 30_000).toISOString() },
          { index: 1, http_status: 409, status: "in_progress", key: KEY, retry_after: 7 },
          { index: 2, http_status: 422, status: "blocked", reason: "invalid_input", errors: [{ field: "data.amount_cents" }] },
        ],
      },
    });
    const [claimed, waiting, refused] = await ops.claimBatch([
      { action: "send-invoice", data: { request_id: "INV-7" }, leaseSeconds: 30, deliveryId: "d-1" },
      { key: KEY },
      { action: "send-invoice", data: { request_id: "INV-8", amount_cents: "x" } },
    ]);
    assert.deepEqual(server.requests[0].body, {
      claims: [
        { action: "send-invoice", data: { request_id: "INV-7" }, lease_seconds: 30, delivery_id: "d-1" },
        { key: KEY },
        { action: "send-invoice", data: { request_id: "INV-8", amount_cents: "x" } },
      ],
    });
    assert.deepEqual([claimed.shouldAct, claimed.token, claimed.idempotencyKey], [true, "t-1", "idem-1"]);
    assert.deepEqual([waiting.shouldAct, waiting.status, waiting.retryAfter], [false, "in_progress", 7]);
    assert.ok(refused instanceof Refused);
    assert.deepEqual([refused.httpStatus, refused.reason], [422, "invalid_input"]);
  });

  it("a list longer than the server's limit goes again in batches of that limit, each item answered in order", async () => {
    const claimed = (index, token) => ({ index, http_status: 201, status: "claimed", key: `k-${token}`, token, attempt: 1, idempotency_key: `k-${token}`, lease_expires_at: new Date(Date.now() + 30_000).toISOString() });
    server.on(
      "POST /api/v1/claims/batch",
      { status: 413, body: { status: "blocked", reason: "batch_too_large", limit: 2 } },
      { status: 200, body: { status: "ok", results: [claimed(0, "a"), claimed(1, "b")] } },
      { status: 200, body: { status: "ok", results: [claimed(0, "c")] } },
    );
    const answers = await ops.claimBatch([{ key: "k-a" }, { key: "k-b" }, { key: "k-c" }]);

    assert.deepEqual(answers.map((claim) => claim.token), ["a", "b", "c"]);
    assert.deepEqual(
      server.sent("POST /api/v1/claims/batch").map((request) => request.body.claims.map((item) => item.key)),
      [["k-a", "k-b", "k-c"], ["k-a", "k-b"], ["k-c"]],
    );
  });

  it("a batch refused whole throws Refused, and a bad item throws before anything is sent", async () => {
    server.on("POST /api/v1/claims/batch", { status: 413, body: { status: "blocked", reason: "batch_too_large" } });
    await assert.rejects(ops.claimBatch([{ key: KEY }]), (error) => error instanceof Refused && error.httpStatus === 413);
    await assert.rejects(ops.claimBatch([{ action: "send-invoice", data: [] }]), TypeError);
    assert.equal(server.requests.length, 1);
  });
});
