// What stands between the client and opsconsole (a proxy's pages, redirects, rate limits) and what a
// flow's message may carry into Claim.fromJSON: none of it may make a report look recorded, lose a
// claim, send the claim's token elsewhere, or set off a storm of heartbeats.
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { after, before, beforeEach, describe, it } from "node:test";

import { Claim, ClaimError, Opsconsole, Refused } from "opsconsole-client";
import { KEY, KEY_PATH, claimed, fakeServer, recorded } from "./fake-server.mjs";
import { waitFor } from "./wait.mjs";

const HEARTBEAT = `POST /api/v1/claims/${KEY_PATH}/heartbeat`;
const OUTCOME = `POST /api/v1/claims/${KEY_PATH}/outcome`;
const HTML = "<html><body><h1>502 Bad Gateway</h1></body></html>";
let server;
let elsewhere;
before(async () => {
  server = await fakeServer();
  elsewhere = await fakeServer();
});
after(async () => {
  await server.close();
  await elsewhere.close();
});
beforeEach(() => {
  server.requests.length = 0;
  elsewhere.requests.length = 0;
  server.on("POST /api/v1/claims", claimed());
  server.on(OUTCOME, recorded("succeeded"));
});

function client(options = {}) {
  return new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, maxBackoffMs: 20, maxRetries: 1, ...options });
}

function claim(ops = client()) {
  return ops.claim("send-invoice", { request_id: "INV-7" }, { leaseSeconds: 30 });
}

describe("a proxy's answers", () => {
  it("a report answered 200 with a page or an empty body is not recorded: it is sent again until opsconsole records it", async () => {
    server.on(OUTCOME, { status: 200, raw: "<html>ok</html>", headers: { "Content-Type": "text/html" } }, { status: 200, raw: "" }, recorded("succeeded"));
    const held = await claim();
    const report = await held.succeeded({ externalId: "rec-1" });
    assert.equal(report.state, "succeeded");
    assert.equal(server.sent(OUTCOME).length, 3);
    assert.equal(held.status, "done");
  });

  it("a heartbeat answered 404 or 409 by a proxy's page does not lose the claim: its report is still sent", async () => {
    server.on(HEARTBEAT, { status: 404, raw: "<html>Not Found</html>" }, { status: 409, raw: "" }, { status: 409, body: { status: "conflict" } });
    const held = await claim(client({ heartbeatEvery: 20 }));
    held.startHeartbeat();
    await waitFor(() => server.sent(HEARTBEAT).length >= 3, "three heartbeats");
    assert.equal(held.lost, false);
    assert.ok(held.heartbeatError, "the failure is shown");
    const report = await held.succeeded({ externalId: "rec-1" });
    assert.equal(report.state, "succeeded");
    assert.equal(server.sent(OUTCOME).length, 1);
  });

  it("a heartbeat answered 200 by something else than opsconsole is a failed heartbeat", async () => {
    server.on(HEARTBEAT, { status: 200, raw: HTML });
    const held = await claim(client({ heartbeatEvery: 20 }));
    held.startHeartbeat();
    await waitFor(() => held.heartbeatError !== undefined, "a heartbeat error");
    held.stopHeartbeat();
  });

  for (const status of [408, 429]) {
    it(`a ${status} (a proxy's timeout or rate limit) is the service failing: retried, for a claim and for a report`, async () => {
      const busy = { status, raw: HTML, headers: { "Retry-After": "0", "Content-Type": "text/html" } };
      server.on("POST /api/v1/claims", busy, claimed());
      server.on(OUTCOME, busy, recorded("succeeded"));
      const held = await claim();
      assert.equal(held.shouldAct, true);
      const report = await held.succeeded({ externalId: "rec-1" });
      assert.equal(report.state, "succeeded");
      assert.equal(server.sent("POST /api/v1/claims").length, 2);
      assert.equal(server.sent(OUTCOME).length, 2);
    });
  }

  for (const status of [301, 307, 308]) {
    it(`a ${status} redirect is not followed: the claim's token goes nowhere else, and the report is refused`, async () => {
      server.on(OUTCOME, { status, raw: "", headers: { Location: `${elsewhere.url}/collect` } });
      elsewhere.on("POST /collect", recorded("succeeded"));
      elsewhere.on("GET /collect", recorded("succeeded"));
      const held = await claim();
      const error = await held.succeeded({ externalId: "rec-1" }).catch((error) => error);
      assert.ok(error instanceof Refused, String(error));
      assert.equal(error.httpStatus, status);
      assert.equal(elsewhere.requests.length, 0, "nothing was sent to the redirect's host");
      assert.equal(held.reported, undefined);
    });
  }
});

describe("a claim carried in a message", () => {
  async function carried(changes) {
    const held = await claim();
    return { ...JSON.parse(JSON.stringify(held)), ...changes };
  }

  for (const leaseSeconds of [-1, 0.001, 4, 3601, "30", "abc", Infinity, null]) {
    it(`fromJSON refuses leaseSeconds ${String(leaseSeconds)} (the heartbeat's period comes from it)`, async () => {
      const json = await carried({ leaseSeconds });
      assert.throws(() => Claim.fromJSON(client(), json), (error) => error instanceof ClaimError && /leaseSeconds/.test(error.message));
    });
  }

  for (const [field, value] of [
    ["token", 42],
    ["token", { a: 1 }],
    ["key", ".."],
    ["key", "."],
    ["httpStatus", "201"],
    ["attempt", "1"],
  ]) {
    it(`fromJSON refuses ${field} ${JSON.stringify(value)}`, async () => {
      const json = await carried({ [field]: value });
      assert.throws(() => Claim.fromJSON(client(), json), ClaimError);
    });
  }

  it("a carried claim that asked for no lease heartbeats as the original does: for the action's lease, not a computed one", async () => {
    // The server's Date and its lease's expiry make a length of 60.4 s: opsconsole takes whole seconds.
    server.on("POST /api/v1/claims", {
      ...claimed({ lease_expires_at: "2026-12-05T08:01:00.400000+00:00" }),
      headers: { Date: "Sat, 05 Dec 2026 08:00:00 GMT" },
    });
    const ops = client({ heartbeatEvery: undefined });
    const held = await ops.claim("send-invoice", { request_id: "INV-7" });
    server.on(HEARTBEAT, { status: 200, body: { status: "extended", key: KEY, lease_expires_at: new Date(Date.now() + 60_000).toISOString() } });
    const again = Claim.fromJSON(ops, JSON.parse(JSON.stringify(held)));
    assert.equal(again.heartbeatEveryMs, held.heartbeatEveryMs);
    await again.extend();
    assert.deepEqual(server.sent(HEARTBEAT)[0].body, { token: "tok-1" });
    const asked = Claim.fromJSON(ops, JSON.parse(JSON.stringify(await claim(ops))));
    await asked.extend();
    assert.deepEqual(server.sent(HEARTBEAT)[1].body, { token: "tok-1", lease_seconds: 30 });
  });

  it("a claim of the longest lease, read against a Date header of whole seconds, is carried", async () => {
    server.on("POST /api/v1/claims", {
      ...claimed({ lease_expires_at: "2026-12-05T09:00:00.900000+00:00" }),
      headers: { Date: "Sat, 05 Dec 2026 08:00:00 GMT" },
    });
    const held = await client().claim("send-invoice", { request_id: "INV-7" });
    const again = Claim.fromJSON(client(), JSON.parse(JSON.stringify(held)));
    assert.equal(again.leaseSeconds, 3600);
  });

  it("a carried claim reports only to the client's own opsconsole, on its own key", async () => {
    const json = await carried({ baseUrl: elsewhere.url, url: `${elsewhere.url}/x` });
    const again = Claim.fromJSON(client(), json);
    await again.succeeded({ externalId: "rec-1" });
    assert.equal(elsewhere.requests.length, 0);
    assert.equal(server.sent(OUTCOME).length, 1);
  });
});

describe("keys that are path segments of their own", () => {
  it("'.' and '..' are refused before anything is sent (a URL would drop or climb them)", async () => {
    const ops = client();
    for (const key of [".", ".."]) {
      await assert.rejects(async () => ops.operation(key), /key/);
      await assert.rejects(async () => ops.cancel(key, {}), /key/);
    }
    assert.equal(server.requests.length, 0);
  });
});

describe("the claim's token", () => {
  it("is not in what util.inspect (console.log) shows of a claim or of what claim(fn) answers", async () => {
    const ops = client();
    const done = await ops.claim("send-invoice", { request_id: "INV-7" }, () => ({ externalId: "rec-1" }));
    const shown = inspect(done, { depth: 10 });
    assert.ok(!shown.includes("tok-1"), shown);
    assert.match(shown, /demo:INV-7/, "the rest is shown");
  });

  it("is not in the error of an answer the client cannot read", async () => {
    server.on("POST /api/v1/claims", { status: 200, body: { status: "claimed", key: KEY, token: "tok-secret" } });
    const error = await client().claim("send-invoice", { request_id: "INV-7" }).catch((error) => error);
    assert.match(error.message, /cannot read/);
    assert.ok(!error.message.includes("tok-secret"), error.message);
  });
});
