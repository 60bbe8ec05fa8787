// Each claim answer and what the client does with it: only a 201 says act.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { Claim, ClaimError, Opsconsole, Refused } from "opsconsole-client";
import { KEY, claimed, fakeServer } from "./fake-server.mjs";

let server;
let ops;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
  ops = new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20 });
});

describe("a claim's answer", () => {
  it("201 claimed says act, with the token, the idempotency key and the lease", async () => {
    server.on("POST /api/v1/claims", claimed());
    const claim = await ops.claim("send-invoice", { request_id: "INV-7" }, { leaseSeconds: 30, deliveryId: "d-1" });
    assert.equal(claim.shouldAct, true);
    assert.equal(claim.status, "claimed");
    assert.equal(claim.token, "tok-1");
    assert.equal(claim.idempotencyKey, KEY);
    assert.equal(claim.attempt, 1);
    assert.ok(claim.leaseExpiresAt instanceof Date);
    assert.equal(claim.leaseSeconds, 30);
    const [request] = server.requests;
    assert.deepEqual(request.body, { action: "send-invoice", data: { request_id: "INV-7" }, lease_seconds: 30, delivery_id: "d-1" });
    assert.equal(request.headers.authorization, "Bearer oc_test");
    assert.equal(request.headers["content-type"], "application/json");
  });

  it("200 done does not act, and carries the result and the record id", async () => {
    server.on("POST /api/v1/claims", { status: 200, body: { status: "done", key: KEY, result: { n: 1 }, external_id: "rec-1" } });
    const claim = await ops.claim("send-invoice", { request_id: "INV-7" });
    assert.equal(claim.shouldAct, false);
    assert.equal(claim.status, "done");
    assert.deepEqual(claim.result, { n: 1 });
    assert.equal(claim.externalId, "rec-1");
  });

  for (const [httpStatus, status] of [
    [409, "in_progress"],
    [409, "retry_later"],
    [409, "waiting"],
    [423, "held"],
    [409, "awaiting_approval"],
    [409, "unknown"],
    [409, "needs_review"],
    [409, "cancelled"],
    [409, "rejected"],
    [409, "superseded"],
    [409, "a_status_of_a_later_server"],
  ]) {
    it(`${httpStatus} ${status} does not act`, async () => {
      server.on("POST /api/v1/claims", { status: httpStatus, body: { status, key: KEY, retry_after: 7, message: "not now" }, headers: { "Retry-After": "7" } });
      const claim = await ops.claim("send-invoice", { request_id: "INV-7" });
      assert.equal(claim.shouldAct, false);
      assert.equal(claim.status, status);
      assert.equal(claim.retryAfter, 7);
      assert.equal(claim.message, "not now");
      await assert.rejects(claim.succeeded({ externalId: "x" }), ClaimError);
      assert.equal(server.requests.length, 1, "nothing reported for a claim that was not ours");
    });
  }

  it("Retry-After is read from the header when the body has none", async () => {
    server.on("POST /api/v1/claims", { status: 423, body: { status: "held", key: KEY }, headers: { "Retry-After": "12" } });
    const claim = await ops.claim("send-invoice", { request_id: "INV-7" });
    assert.equal(claim.retryAfter, 12);
  });

  for (const [httpStatus, body] of [
    [409, { status: "blocked", reason: "payload_conflict", conflict_id: 3 }],
    [422, { status: "blocked", reason: "invalid_input", errors: [{ field: "data.amount_cents", message: "required" }] }],
    [401, { status: "unauthorized", message: "a bad token" }],
    [404, { status: "not_found" }],
    [400, { status: "malformed_json" }],
  ]) {
    it(`${httpStatus} ${body.status} throws Refused`, async () => {
      server.on("POST /api/v1/claims", { status: httpStatus, body });
      const error = await ops.claim("send-invoice", { request_id: "INV-7" }).catch((error) => error);
      assert.ok(error instanceof Refused, String(error));
      assert.equal(error.httpStatus, httpStatus);
      assert.equal(error.status, body.status);
      assert.equal(error.reason, body.reason ?? "");
      assert.deepEqual(error.body, body);
    });
  }

  it("a 2xx it cannot read is an error, never act", async () => {
    server.on("POST /api/v1/claims", { status: 201, body: { status: "claimed", key: KEY } });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }), /cannot read/);
    server.on("POST /api/v1/claims", { status: 200, body: { status: "claimed", key: KEY, token: "t" } });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }), /cannot read/);
  });

  it("a claim by key sends the key and gives the data", async () => {
    server.on("POST /api/v1/claims", claimed({ data: { request_id: "INV-7", amount_cents: 4500 } }));
    const claim = await ops.claimByKey(KEY, { leaseSeconds: 120 });
    assert.deepEqual(server.requests[0].body, { key: KEY, lease_seconds: 120 });
    assert.equal(claim.shouldAct, true);
    assert.deepEqual(claim.data, { request_id: "INV-7", amount_cents: 4500 });
  });

  it("bad arguments are refused before anything is sent", async () => {
    await assert.rejects(ops.claim("", { a: 1 }), /action is/);
    await assert.rejects(ops.claim("send-invoice", null), /data is/);
    await assert.rejects(ops.claim("send-invoice", [1]), /data is/);
    await assert.rejects(ops.claimByKey(""), /key is/);
    assert.throws(() => new Opsconsole({ baseUrl: "127.0.0.1:8000", token: "t" }), /baseUrl/);
    assert.throws(() => new Opsconsole({ baseUrl: "http://x", token: "" }), /token/);
    assert.throws(() => new Opsconsole({ baseUrl: "http://x", token: "t", maxRetries: -1 }), /maxRetries/);
    assert.equal(server.requests.length, 0);
  });
});

describe("a claim carried in a message", () => {
  it("toJSON and fromJSON keep what a report needs", async () => {
    server.on("POST /api/v1/claims", claimed());
    const claim = await ops.claim("send-invoice", { request_id: "INV-7" }, { leaseSeconds: 30 });
    const json = JSON.parse(JSON.stringify(claim));
    assert.equal(json.key, KEY);
    assert.equal(json.token, "tok-1");
    assert.equal(json.idempotencyKey, KEY);
    assert.equal(json.httpStatus, 201);
    assert.equal(json.leaseSeconds, 30);
    const again = Claim.fromJSON(ops, json);
    assert.equal(again.shouldAct, true);
    assert.equal(again.token, "tok-1");
    assert.equal(again.leaseExpiresAt.toISOString(), claim.leaseExpiresAt.toISOString());
    assert.equal(again.leaseSeconds, 30);
  });

  it("fromJSON refuses what is not a claim", () => {
    assert.throws(() => Claim.fromJSON(ops, { status: "claimed" }), /not a claim/);
    assert.throws(() => Claim.fromJSON(ops, { key: KEY, httpStatus: 201, status: "claimed", leaseSeconds: 30 }), /no token/);
  });
});

describe("the package", () => {
  it("loads with require (CommonJS, for n8n and Node-RED) as with import", async () => {
    const { createRequire } = await import("node:module");
    const required = createRequire(import.meta.url)("opsconsole-client");
    const imported = await import("opsconsole-client");
    assert.deepEqual(Object.keys(required).sort(), Object.keys(imported).sort());
    assert.equal(typeof required.Opsconsole, "function");
    assert.equal(required.outcomeOfVendorCall({ statusCode: 503 }).outcome, "unknown");
  });
});
