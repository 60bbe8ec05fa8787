// The service's own failures (5xx, network errors, timeouts) are retried with backoff, then thrown as
// ServiceUnavailable: never taken as "go ahead".
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { Opsconsole, ServiceUnavailable } from "opsconsole-client";
import { claimed, fakeServer } from "./fake-server.mjs";

let server;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
});

function client(options = {}) {
  return new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20, ...options });
}

describe("retries", () => {
  it("a 503 with Retry-After is sent again, then the answer is read", async () => {
    server.on("POST /api/v1/claims", { status: 503, body: { status: "busy" }, headers: { "Retry-After": "0" } }, claimed());
    const claim = await client().claim("send-invoice", { request_id: "INV-7" });
    assert.equal(claim.shouldAct, true);
    const sent = server.sent("POST /api/v1/claims");
    assert.equal(sent.length, 2);
    assert.deepEqual(sent[0].body, sent[1].body, "the same request again");
  });

  for (const failure of [
    { status: 500, body: { status: "error" } },
    { status: 502, raw: "<html>bad gateway</html>" },
    { destroy: true },
  ]) {
    it(`${JSON.stringify(failure).slice(0, 40)} is retried`, async () => {
      server.on("POST /api/v1/claims", failure, claimed());
      const claim = await client().claim("send-invoice", { request_id: "INV-7" });
      assert.equal(claim.shouldAct, true);
      assert.equal(server.sent("POST /api/v1/claims").length, 2);
    });
  }

  it("a request that times out is retried", async () => {
    server.on("POST /api/v1/claims", { hang: true }, claimed());
    const claim = await client({ timeoutMs: 1000 }).claim("send-invoice", { request_id: "INV-7" });
    assert.equal(claim.shouldAct, true);
    assert.equal(server.sent("POST /api/v1/claims").length, 2);
  });

  it("a service that stays down throws ServiceUnavailable after maxRetries, with the last status", async () => {
    server.on("POST /api/v1/claims", { status: 503, body: { status: "unavailable" }, headers: { "Retry-After": "0" } });
    const error = await client({ maxRetries: 2 }).claim("send-invoice", { request_id: "INV-7" }).catch((error) => error);
    assert.ok(error instanceof ServiceUnavailable, String(error));
    assert.equal(error.attempts, 3);
    assert.equal(error.httpStatus, 503);
    assert.equal(error.retryAfter, 0);
    assert.equal(server.sent("POST /api/v1/claims").length, 3);
  });

  it("ServiceUnavailable keeps the network error as its cause", async () => {
    const ops = new Opsconsole({ baseUrl: "http://127.0.0.1:1", token: "t", maxRetries: 1, backoffMs: 1 });
    const error = await ops.claim("send-invoice", { request_id: "INV-7" }).catch((error) => error);
    assert.ok(error instanceof ServiceUnavailable, String(error));
    assert.equal(error.attempts, 2);
    assert.equal(error.httpStatus, undefined);
    assert.ok(error.cause instanceof Error);
    assert.match(error.message, /ECONNREFUSED|fetch failed/);
  });

  it("a deferring answer is not retried by the client", async () => {
    server.on("POST /api/v1/claims", { status: 409, body: { status: "in_progress", retry_after: 30 }, headers: { "Retry-After": "30" } });
    const claim = await client().claim("send-invoice", { request_id: "INV-7" });
    assert.equal(claim.status, "in_progress");
    assert.equal(server.sent("POST /api/v1/claims").length, 1);
  });

  it("Retry-After is honoured up to maxBackoffMs", () => {
    const ops = client({ backoffMs: 100, maxBackoffMs: 5000 });
    assert.equal(ops.reportDelayMs(1, 2), 2000);
    assert.equal(ops.reportDelayMs(1, 60), 5000);
    assert.equal(ops.reportDelayMs(4, 0), 0);
  });

  it("the backoff doubles with jitter up to its cap", () => {
    const ops = client({ backoffMs: 100, maxBackoffMs: 500 });
    for (let i = 0; i < 50; i++) {
      const first = ops.reportDelayMs(1);
      const third = ops.reportDelayMs(3);
      const tenth = ops.reportDelayMs(10);
      assert.ok(first >= 50 && first <= 100, `first ${first}`);
      assert.ok(third >= 200 && third <= 400, `third ${third}`);
      assert.ok(tenth >= 250 && tenth <= 500, `tenth ${tenth}`);
    }
  });
});
