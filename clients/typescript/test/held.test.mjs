// The registry a flow runtime's claim and report nodes share: heartbeats while held, a cap, a take
// that hands the live claim to its report, and a release by owner.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { HeldClaims, Opsconsole } from "opsconsole-client";
import { KEY_PATH, claimed, fakeServer } from "./fake-server.mjs";
import { waitFor } from "./wait.mjs";

const HEARTBEAT = `POST /api/v1/claims/${KEY_PATH}/heartbeat`;
let server;
before(async () => {
  server = await fakeServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
  server.on(HEARTBEAT, () => ({ status: 200, body: { status: "extended", lease_expires_at: new Date(Date.now() + 60_000).toISOString() } }));
});

async function aClaim(token = "tok-1") {
  server.on("POST /api/v1/claims", claimed({ token }));
  const ops = new Opsconsole({ baseUrl: server.url, token: "oc_test", backoffMs: 1, heartbeatEvery: 20 });
  return ops.claim("send-invoice", { request_id: "INV-7" });
}

describe("HeldClaims", () => {
  it("heartbeats a held claim and hands it, live, to the one report that takes it", async () => {
    const held = new HeldClaims();
    const claim = await aClaim();
    held.hold(claim, { maxHoldSeconds: 60 });
    await waitFor(() => server.sent(HEARTBEAT).length >= 2, "two heartbeats");

    assert.equal(held.get(claim.token), claim);
    assert.equal(held.take(claim.token), claim);
    assert.equal(held.take(claim.token), undefined);
    assert.equal(held.size, 0);
    claim.stopHeartbeat();
  });

  it("gives a claim up at its cap: heartbeats stop and the owner is told", async () => {
    const held = new HeldClaims();
    const claim = await aClaim();
    let givenUp;
    held.hold(claim, { maxHoldSeconds: 0.1, onGiveUp: (c) => (givenUp = c) });
    await waitFor(() => givenUp !== undefined, "the cap");
    const beats = server.sent(HEARTBEAT).length;
    await new Promise((resolve) => setTimeout(resolve, 80));

    assert.equal(givenUp, claim);
    assert.equal(held.size, 0);
    assert.equal(server.sent(HEARTBEAT).length, beats);
  });

  it("lets go of what one owner holds and keeps the others'", async () => {
    const held = new HeldClaims();
    const mine = await aClaim("tok-1");
    const theirs = await aClaim("tok-2");
    held.hold(mine, { maxHoldSeconds: 60, owner: "node-a" });
    held.hold(theirs, { maxHoldSeconds: 60, owner: "node-b" });

    held.releaseAll("node-a");

    assert.equal(held.get(mine.token), undefined);
    assert.equal(held.get(theirs.token), theirs);
    held.release(theirs.token);
    assert.equal(held.size, 0);
  });

  it("holds nothing without a token or with a cap of 0", async () => {
    const held = new HeldClaims();
    const claim = await aClaim();
    held.hold(claim, { maxHoldSeconds: 0 });
    held.hold({ token: undefined, startHeartbeat() { throw new Error("no heartbeat without a token"); } }, { maxHoldSeconds: 60 });

    assert.equal(held.size, 0);
  });
});
