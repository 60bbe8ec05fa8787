// While a claim is held the lease is extended every third of it; a report or stopHeartbeat() ends
// that, a stale token marks the claim lost, a failed heartbeat is tried again sooner.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { Claim, ClaimLost, Opsconsole } from "opsconsole-client";
import { KEY, KEY_PATH, claimed, fakeServer, recorded } from "./fake-server.mjs";
import { waitFor } from "./wait.mjs";

const HEARTBEAT = `POST /api/v1/claims/${KEY_PATH}/heartbeat`;
const OUTCOME = `POST /api/v1/claims/${KEY_PATH}/outcome`;
const extended = () => ({ status: 200, body: { status: "extended", key: KEY, lease_expires_at: new Date(Date.now() + 60_000).toISOString() } });
let server;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
  server.on("POST /api/v1/claims", claimed());
  server.on(HEARTBEAT, extended);
  server.on(OUTCOME, recorded("succeeded"));
});

function client(options = {}) {
  return new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20, heartbeatEvery: 20, ...options });
}

describe("the heartbeat", () => {
  it("extends the lease while fn runs, with the token and the lease asked for, and stops at the report", async () => {
    const ops = client();
    const performed = await ops.claim(
      "send-invoice",
      { request_id: "INV-7" },
      async () => {
        await waitFor(() => server.sent(HEARTBEAT).length >= 3, "three heartbeats");
        return { externalId: "rec-1" };
      },
      { leaseSeconds: 30 },
    );
    assert.equal(performed.performed, true);
    const beats = server.sent(HEARTBEAT);
    assert.deepEqual(beats[0].body, { token: "tok-1", lease_seconds: 30 });
    const count = beats.length;
    await new Promise((resolve) => setTimeout(resolve, 100)); // five periods: none may come
    assert.ok(server.sent(HEARTBEAT).length <= count + 1, "no heartbeat after the report (but one in flight)");
  });

  it("asks for the action's lease when none was given", async () => {
    const held = await client().claim("send-invoice", { request_id: "INV-7" });
    held.startHeartbeat();
    await waitFor(() => server.sent(HEARTBEAT).length >= 1, "a heartbeat");
    held.stopHeartbeat();
    assert.deepEqual(server.sent(HEARTBEAT)[0].body, { token: "tok-1" });
  });

  it("stops on stopHeartbeat(), and none runs unless started", async () => {
    const held = await client().claim("send-invoice", { request_id: "INV-7" });
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(server.sent(HEARTBEAT).length, 0, "not started: none");
    held.startHeartbeat();
    await waitFor(() => server.sent(HEARTBEAT).length >= 2, "two heartbeats");
    held.stopHeartbeat();
    const count = server.sent(HEARTBEAT).length;
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(server.sent(HEARTBEAT).length <= count + 1, "at most the one in flight");
  });

  it("is not started for a claim that does not say act", async () => {
    server.on("POST /api/v1/claims", { status: 409, body: { status: "in_progress", key: KEY } });
    const held = await client().claim("send-invoice", { request_id: "INV-7" });
    held.startHeartbeat();
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(server.sent(HEARTBEAT).length, 0);
  });

  for (const [lease, date, expires, every] of [
    [30, null, null, 10_000],
    [undefined, "Sat, 05 Dec 2026 08:00:00 GMT", "2026-12-05T08:01:30Z", 30_000],
    [undefined, null, undefined, 20_000],
  ]) {
    it(`runs every third of the lease (${lease ?? expires ?? "default"})`, async () => {
      const headers = date ? { Date: date } : {};
      server.on("POST /api/v1/claims", { ...claimed(expires === undefined ? {} : { lease_expires_at: expires ?? undefined }), headers });
      if (expires === undefined) server.on("POST /api/v1/claims", { status: 201, body: { status: "claimed", key: KEY, token: "t" } });
      const ops = new Opsconsole({ baseUrl: server.url, token: "t" });
      const held = await ops.claim("send-invoice", { request_id: "INV-7" }, lease ? { leaseSeconds: lease } : {});
      assert.equal(held.heartbeatEveryMs, every);
    });
  }

  it("a heartbeat answered 409 stale_token marks the claim lost; nothing more is sent and a report throws ClaimLost", async () => {
    server.on(HEARTBEAT, { status: 409, body: { status: "stale_token", key: KEY, state: "unknown" } });
    const held = await client().claim("send-invoice", { request_id: "INV-7" });
    held.startHeartbeat();
    await waitFor(() => held.lost, "the claim lost");
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(server.sent(HEARTBEAT).length, 1);
    await assert.rejects(held.succeeded({ externalId: "rec-1" }), ClaimLost);
    assert.equal(server.sent(OUTCOME).length, 0);
  });

  it("a failed heartbeat is not retried by the transport, shows its error, and is tried again until one succeeds", async () => {
    server.on(HEARTBEAT, { status: 503, body: { status: "busy" } }, { status: 503, body: { status: "busy" } }, extended);
    const held = await client({ heartbeatEvery: 30 }).claim("send-invoice", { request_id: "INV-7" });
    held.startHeartbeat();
    await waitFor(() => held.heartbeatError !== undefined, "a heartbeat error");
    assert.match(String(held.heartbeatError), /503/);
    await waitFor(() => server.sent(HEARTBEAT).length >= 3 && held.heartbeatError === undefined, "a heartbeat that succeeds");
    held.stopHeartbeat();
    assert.equal(held.lost, false);
  });

  it("runs again from a claim carried as JSON", async () => {
    const ops = client();
    const held = await ops.claim("send-invoice", { request_id: "INV-7" }, { leaseSeconds: 30 });
    const carried = Claim.fromJSON(ops, JSON.parse(JSON.stringify(held)));
    carried.startHeartbeat();
    await waitFor(() => server.sent(HEARTBEAT).length >= 1, "a heartbeat");
    await carried.succeeded({ externalId: "rec-1" });
    assert.deepEqual(server.sent(HEARTBEAT)[0].body, { token: "tok-1", lease_seconds: 30 });
    assert.equal(server.sent(OUTCOME)[0].body.token, "tok-1");
  });
});
