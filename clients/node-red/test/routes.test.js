"use strict";
// The rules that pick a node's output, and the held claims' cap, without Node-RED.
const test = require("node:test");
const assert = require("node:assert/strict");
const routes = require("../lib/routes");
const held = require("../lib/held");

test("only a 201 leaves the claim node by 'act now'", () => {
  assert.equal(routes.claimOutput({ shouldAct: true, status: "claimed" }), routes.ACT);
  assert.equal(routes.claimOutput({ shouldAct: false, status: "claimed" }), routes.PERSON);
  assert.equal(routes.claimOutput({ shouldAct: false, status: "done" }), routes.DONE);
});

test("answers that say 'later' wait; every other answer, known or not, is a person's", () => {
  for (const status of ["in_progress", "retry_later", "waiting", "held", "unavailable", "busy"]) {
    assert.equal(routes.claimOutput({ shouldAct: false, status }), routes.WAIT, status);
  }
  for (const status of ["unknown", "needs_review", "awaiting_approval", "blocked", "cancelled", "rejected", "superseded", "something_new"]) {
    assert.equal(routes.claimOutput({ shouldAct: false, status }), routes.PERSON, status);
  }
});

test("the delay comes from Retry-After seconds, a time to claim at, or a default", () => {
  assert.equal(routes.delayMs({ retryAfter: 2 }), 2000);
  assert.equal(routes.delayMs({ retryAfter: "0.5" }), 500);
  assert.equal(routes.delayMs({ at: new Date(10_000), now: 7_000 }), 3_500);
  assert.equal(routes.delayMs({ at: new Date(1_000), now: 7_000 }), 500, "a time passed: claim at once, a little after");
  assert.equal(routes.delayMs({}), routes.DEFAULT_WAIT_SECONDS * 1000);
  assert.equal(routes.delayMs({ retryAfter: "soon" }), routes.DEFAULT_WAIT_SECONDS * 1000);
});

test("the report node's output follows the state the report left", () => {
  assert.equal(routes.reportOutput("succeeded"), routes.RECORDED);
  assert.equal(routes.reportOutput("retrying"), routes.RETRY);
  for (const state of ["unknown", "needs_review", ""]) assert.equal(routes.reportOutput(state), routes.DECIDE);
});

test("a property by its dotted path", () => {
  assert.equal(routes.property({ payload: { id: 7 } }, "payload.id"), 7);
  assert.equal(routes.property({ payload: "text" }, "payload.id"), undefined);
  assert.equal(routes.property({}, ""), undefined);
});

test("a message on one output of several", () => {
  assert.deepEqual(routes.on(2, 4, "m"), [null, null, "m", null]);
});

function fakeClaim(key) {
  return {
    beats: 0,
    running: false,
    token: `${key}-token`,
    toJSON: () => ({ key, token: `${key}-token` }),
    startHeartbeat() { this.running = true; },
    stopHeartbeat() { this.running = false; },
  };
}

test("a held claim heartbeats until its report takes it", () => {
  const claim = fakeClaim("k1");
  held.hold(claim, { maxHoldSeconds: 60, owner: "node" });
  assert.ok(claim.running);
  assert.equal(held.take({ key: "k1", token: "other" }), undefined, "another token is not this claim");
  assert.equal(held.take(claim.toJSON()), claim);
  assert.equal(held.take(claim.toJSON()), undefined, "taken once");
});

test("past its cap a held claim's heartbeats stop and the node is told", async () => {
  const claim = fakeClaim("k2");
  const given = [];
  held.hold(claim, { maxHoldSeconds: 0.05, owner: "node", onGiveUp: (c) => given.push(c) });
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(claim.running, false);
  assert.deepEqual(given, [claim]);
  assert.equal(held.take(claim.toJSON()), undefined);
});

test("a closed node lets go of what it holds, and only that", () => {
  const mine = fakeClaim("k3");
  const theirs = fakeClaim("k4");
  held.hold(mine, { maxHoldSeconds: 60, owner: "a" });
  held.hold(theirs, { maxHoldSeconds: 60, owner: "b" });
  held.releaseAll("a");
  assert.equal(mine.running, false);
  assert.equal(theirs.running, true);
  assert.equal(held.take(theirs.toJSON()), theirs);
});

test("the hold cap: 600 s when unset, else whole seconds from 1 to a day; anything else is a clear error", () => {
  assert.equal(routes.holdSeconds(""), 600);
  assert.equal(routes.holdSeconds(undefined), 600);
  assert.equal(routes.holdSeconds("90"), 90);
  // A negative cap gave up at once; one past setTimeout's 24.8 days overflowed and gave up at once too.
  for (const value of ["-5", "0", "abc", "3000000", 86401]) {
    assert.throws(() => routes.holdSeconds(value), /Hold at most.*1 to 86400/, String(value));
  }
});
