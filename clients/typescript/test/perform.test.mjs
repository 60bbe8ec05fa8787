// claim(action, data, fn): fn runs only after a 201; what it returns is recorded as the success, what it
// throws is reported (failed when nothing was sent, unknown whenever the vendor may have acted) and
// thrown again. Real fetch calls to a vendor of the test's show the network errors as they come.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, it } from "node:test";

import { Opsconsole, Permanent, VendorCallError } from "opsconsole-client";
import { KEY, KEY_PATH, claimed, fakeServer, recorded } from "./fake-server.mjs";

const OUTCOME = `POST /api/v1/claims/${KEY_PATH}/outcome`;
let server;
let vendor;
let ops;
before(async () => {
  server = await fakeServer();
  vendor = await fakeServer();
});
after(async () => {
  await server.close();
  await vendor.close();
});
beforeEach(() => {
  server.requests.length = 0;
  vendor.requests.length = 0;
  ops = new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20 });
  server.on("POST /api/v1/claims", claimed());
  server.on(OUTCOME, (body) => recorded({ succeeded: "succeeded", failed: body.category === "permanent" ? "needs_review" : "retrying", unknown: "unknown" }[body.outcome]));
});

/** A vendor call as a flow writes it: fetch, the idempotency key sent, non-2xx thrown with its status. */
async function createRecord(claim, timeoutMs = 5000) {
  const response = await fetch(`${vendor.url}/records`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": claim.idempotencyKey },
    body: JSON.stringify({ invoice: "INV-7" }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = await response.json();
  if (!response.ok) throw new VendorCallError(`the vendor answered ${response.status}`, { sent: true, statusCode: response.status, headers: response.headers });
  return { externalId: body.id, result: { number: body.number } };
}

function reported() {
  return server.sent(OUTCOME).map((request) => request.body);
}

describe("claim(action, data, fn)", () => {
  it("performs after a 201 and records what fn returned", async () => {
    vendor.on("POST /records", { status: 201, body: { id: 17, number: "F-17" } });
    const done = await ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim));
    assert.equal(done.performed, true);
    assert.equal(done.status, "done");
    assert.equal(done.externalId, "17");
    assert.deepEqual(done.result, { number: "F-17" });
    assert.equal(done.report.state, "succeeded");
    assert.equal(vendor.requests[0].headers["idempotency-key"], KEY);
    assert.deepEqual(reported(), [{ token: "tok-1", outcome: "succeeded", external_id: "17", result: { number: "F-17" } }]);
  });

  it("a fn that returns nothing records a success without a result", async () => {
    const done = await ops.claim("send-invoice", { request_id: "INV-7" }, () => undefined);
    assert.equal(done.performed, true);
    assert.deepEqual(reported(), [{ token: "tok-1", outcome: "succeeded" }]);
  });

  for (const [httpStatus, body] of [
    [200, { status: "done", key: KEY, result: { number: "F-1" }, external_id: "1" }],
    [409, { status: "in_progress", key: KEY, retry_after: 5 }],
    [409, { status: "unknown", key: KEY }],
    [409, { status: "needs_review", key: KEY }],
    [409, { status: "awaiting_approval", key: KEY }],
    [423, { status: "held", key: KEY, retry_after: 60 }],
  ]) {
    it(`never calls fn on ${httpStatus} ${body.status}`, async () => {
      server.on("POST /api/v1/claims", { status: httpStatus, body });
      let called = false;
      const answer = await ops.claim("send-invoice", { request_id: "INV-7" }, () => {
        called = true;
      });
      assert.equal(called, false);
      assert.equal(answer.performed, false);
      assert.equal(answer.status, body.status);
      assert.equal(answer.retryAfter, body.retry_after);
      assert.deepEqual(answer.result, body.result);
      assert.deepEqual(reported(), []);
    });
  }

  it("a vendor timeout is reported unknown, never failed, and the error is thrown", async () => {
    vendor.on("POST /records", { hang: true });
    const error = await ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim, 100)).catch((error) => error);
    assert.equal(error.name, "TimeoutError");
    assert.equal(reported()[0].outcome, "unknown");
    assert.match(reported()[0].error, /TimeoutError/);
  });

  it("a connection reset after sending is unknown", async () => {
    vendor.on("POST /records", { destroy: true });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim)));
    assert.equal(reported()[0].outcome, "unknown");
  });

  it("a vendor that refuses connections (nothing sent) is a transient failure", async () => {
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, () => fetch(`http://127.0.0.1:${port}/records`, { method: "POST" })));
    assert.equal(reported()[0].outcome, "failed");
    assert.equal(reported()[0].category, "transient");
  });

  it("after claim.acted() (the vendor was called), a later refused connection is unknown, never failed", async () => {
    // fn creates the record, then its next call (a notice elsewhere) finds nothing listening: a
    // transient failure would be tried again and the vendor, without idempotency keys, records twice.
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    vendor.on("POST /records", { status: 201, body: { id: 17, number: "F-17" } });
    const error = await ops
      .claim("send-invoice", { request_id: "INV-7" }, async (claim) => {
        await createRecord(claim);
        claim.acted();
        await fetch(`http://127.0.0.1:${port}/notices`, { method: "POST" });
      })
      .catch((error) => error);
    assert.equal(error.cause?.code, "ECONNREFUSED", String(error));
    assert.equal(reported()[0].outcome, "unknown");
    assert.equal(vendor.requests.length, 1);
  });

  it("a vendor 500 is unknown; a 400 permanent; a 429 transient with its Retry-After", async () => {
    vendor.on("POST /records", { status: 500, body: { error: "oops" } });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim)));
    vendor.on("POST /records", { status: 400, body: { error: "bad" } });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim)));
    vendor.on("POST /records", { status: 429, body: { error: "slow down" }, headers: { "Retry-After": "4" } });
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, (claim) => createRecord(claim)));
    const [five, four, limited] = reported();
    assert.equal(five.outcome, "unknown");
    assert.deepEqual([four.outcome, four.category], ["failed", "permanent"]);
    assert.deepEqual([limited.outcome, limited.category, limited.retry_after], ["failed", "transient", 4]);
  });

  it("Permanent thrown by fn is a permanent failure", async () => {
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, () => {
      throw new Permanent("the customer has no address");
    }), Permanent);
    assert.deepEqual(reported(), [{ token: "tok-1", outcome: "failed", category: "permanent", error: "Permanent: the customer has no address" }]);
  });

  it("a success the server refuses is reported unknown (the vendor acted) and thrown", async () => {
    server.on(OUTCOME, (body) =>
      body.outcome === "succeeded" ? { status: 422, body: { status: "blocked", reason: "invalid_input", errors: [{ field: "external_id" }] } } : recorded("unknown"),
    );
    const error = await ops.claim("send-invoice", { request_id: "INV-7" }, () => ({ externalId: "x".repeat(300) })).catch((error) => error);
    assert.equal(error.name, "Refused");
    assert.deepEqual(reported().map((body) => body.outcome), ["succeeded", "unknown"]);
  });

  it("a result that is not an object is not sent; unknown is reported", async () => {
    await assert.rejects(ops.claim("send-invoice", { request_id: "INV-7" }, () => ({ result: "F-1" })), TypeError);
    assert.deepEqual(reported().map((body) => body.outcome), ["unknown"]);
  });

  it("when the report of fn's error is refused, fn's error is thrown with the report's attached", async () => {
    server.on(OUTCOME, { status: 409, body: { status: "stale_token", key: KEY } });
    const error = await ops.claim("send-invoice", { request_id: "INV-7" }, () => {
      throw new Error("the vendor's SDK failed");
    }).catch((error) => error);
    assert.equal(error.message, "the vendor's SDK failed");
    assert.equal(error.reportError.name, "ClaimLost");
  });

  it("claimByKey(key, fn) performs with the claim's data", async () => {
    server.on("POST /api/v1/claims", claimed({ data: { request_id: "INV-7", amount_cents: 4500 } }));
    const done = await ops.claimByKey(KEY, (claim) => ({ externalId: `rec-${claim.data.amount_cents}` }), { leaseSeconds: 60 });
    assert.equal(done.externalId, "rec-4500");
    assert.deepEqual(server.sent("POST /api/v1/claims")[0].body, { key: KEY, lease_seconds: 60 });
  });
});
