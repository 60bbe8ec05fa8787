// What a claim reports: each outcome's body, retried until recorded, never twice differently, and a
// stale token ends the claim.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { ClaimError, ClaimLost, Opsconsole, Refused, ServiceUnavailable } from "opsconsole-client";
import { KEY, KEY_PATH, claimed, fakeServer, recorded } from "./fake-server.mjs";

const OUTCOME = `POST /api/v1/claims/${KEY_PATH}/outcome`;
let server;
let ops;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
  ops = new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20, maxRetries: 1 });
  server.on("POST /api/v1/claims", claimed());
});

async function claim() {
  return ops.claim("send-invoice", { request_id: "INV-7" });
}

describe("reports", () => {
  it("succeeded records the record id and result, and the claim reads done", async () => {
    server.on(OUTCOME, recorded("succeeded"));
    const held = await claim();
    const report = await held.succeeded({ externalId: 42, result: { number: "F-1" } });
    assert.deepEqual(server.sent(OUTCOME)[0].body, { token: "tok-1", outcome: "succeeded", external_id: "42", result: { number: "F-1" } });
    assert.equal(report.status, "recorded");
    assert.equal(report.state, "succeeded");
    assert.equal(held.status, "done");
    assert.equal(held.reported, "succeeded");
    assert.equal(held.externalId, "42");
    assert.deepEqual(held.result, { number: "F-1" });
  });

  it("a transient failure sends its error and retry_after, and the claim reads retry_later", async () => {
    server.on(OUTCOME, recorded("retrying", { next_attempt_at: "2026-12-05T08:00:00Z" }));
    const held = await claim();
    const report = await held.failed({ category: "transient", error: "vendor busy", retryAfter: 30 });
    assert.deepEqual(server.sent(OUTCOME)[0].body, { token: "tok-1", outcome: "failed", category: "transient", error: "vendor busy", retry_after: 30 });
    assert.equal(report.nextAttemptAt, "2026-12-05T08:00:00Z");
    assert.equal(held.status, "retry_later");
  });

  it("a URL in a report's error is cut to its origin: a key in its user part, path or query is never sent", async () => {
    server.on(OUTCOME, recorded("unknown"));
    const held = await claim();
    await held.unknown({ error: "ETIMEDOUT : https://bot:pa55@vendor.test:8443/bot123:SECRET/send?api_key=SECRET2#x and more" });
    const { error } = server.sent(OUTCOME)[0].body;
    assert.equal(error, "ETIMEDOUT : https://vendor.test:8443 and more");
  });

  it("a permanent failure reads needs_review; unknown reads unknown", async () => {
    server.on(OUTCOME, recorded("needs_review"));
    const first = await claim();
    await first.failed({ category: "permanent", error: "declined" });
    assert.equal(first.status, "needs_review");
    server.on(OUTCOME, recorded("unknown"));
    const second = await claim();
    await second.unknown({ error: "timed out" });
    assert.deepEqual(server.sent(OUTCOME).at(-1).body, { token: "tok-1", outcome: "unknown", error: "timed out" });
    assert.equal(second.status, "unknown");
  });

  it("failed takes only the two categories, and retryAfter only when transient", async () => {
    const held = await claim();
    await assert.rejects(held.failed({ category: "fatal" }), /transient.*permanent/);
    await assert.rejects(held.failed({ category: "permanent", retryAfter: 3 }), /transient failure only/);
    await assert.rejects(held.succeeded({ result: [1] }), /an object/);
    await assert.rejects(held.report({ outcome: "maybe" }), /succeeded.*failed.*unknown/);
    assert.equal(server.sent(OUTCOME).length, 0);
  });

  it("an error longer than the server keeps is cut to 500 characters", async () => {
    server.on(OUTCOME, recorded("unknown"));
    const held = await claim();
    await held.unknown({ error: "x".repeat(2000) });
    assert.equal(server.sent(OUTCOME)[0].body.error.length, 500);
  });

  it("a report is retried until it is recorded, with the same token and body", async () => {
    const busy = { status: 503, body: { status: "busy" }, headers: { "Retry-After": "0" } };
    // maxRetries is 1: five failures are more than one request's retries; the report goes on.
    server.on(OUTCOME, busy, { destroy: true }, busy, { status: 500, raw: "oops" }, busy, recorded("succeeded"));
    const held = await claim();
    const report = await held.succeeded({ externalId: "rec-1" });
    assert.equal(report.state, "succeeded");
    const sent = server.sent(OUTCOME);
    assert.equal(sent.length, 6);
    for (const request of sent) assert.deepEqual(request.body, sent[0].body);
  });

  it("a report stops being retried once the lease is over, and throws ServiceUnavailable", async () => {
    server.on("POST /api/v1/claims", claimed({ lease_expires_at: new Date(Date.now() - 1000).toISOString() }));
    server.on(OUTCOME, { status: 503, body: { status: "busy" }, headers: { "Retry-After": "0" } });
    const held = await claim();
    await assert.rejects(held.succeeded({ externalId: "rec-1" }), ServiceUnavailable);
    assert.equal(server.sent(OUTCOME).length, 2, "one request and its one retry");
    assert.equal(held.reported, undefined);
  });

  it("the same report again is answered as the first; a different one is refused by the client", async () => {
    server.on(OUTCOME, recorded("succeeded"));
    const held = await claim();
    const first = await held.succeeded({ externalId: "rec-1" });
    const again = await held.succeeded({ externalId: "rec-1" });
    assert.equal(again, first);
    await assert.rejects(held.unknown({ error: "?" }), (error) => error instanceof ClaimError && /already reported \(succeeded\)/.test(error.message));
    assert.equal(server.sent(OUTCOME).length, 1);
  });

  it("a report answered 409 stale_token throws ClaimLost and marks the claim lost", async () => {
    server.on(OUTCOME, { status: 409, body: { status: "stale_token", key: KEY, state: "unknown", message: "the lease expired" } });
    const held = await claim();
    const error = await held.succeeded({ externalId: "rec-1" }).catch((error) => error);
    assert.ok(error instanceof ClaimLost, String(error));
    assert.match(error.message, /lease expired/);
    assert.equal(held.lost, true);
    await assert.rejects(held.unknown(), ClaimLost);
    assert.equal(server.sent(OUTCOME).length, 1, "nothing more is sent for a lost claim");
  });

  it("an outcome conflict is a typed refusal", async () => {
    server.on(OUTCOME, { status: 409, body: { status: "outcome_conflict", message: "already reported failed" } });
    const held = await claim();
    const error = await held.succeeded().catch((error) => error);
    assert.ok(error instanceof Refused);
    assert.equal(error.status, "outcome_conflict");
  });

  it("a claim that was not claimed has nothing to report", async () => {
    server.on("POST /api/v1/claims", { status: 200, body: { status: "done", key: KEY } });
    const held = await claim();
    await assert.rejects(held.succeeded(), /nothing to report/);
    assert.equal(server.sent(OUTCOME).length, 0);
  });
});
