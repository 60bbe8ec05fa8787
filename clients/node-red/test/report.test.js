"use strict";
// The report node in a stand-in for Node-RED's runtime: what it does with the claim it takes.
const test = require("node:test");
const assert = require("node:assert/strict");
const { EventEmitter } = require("node:events");
const held = require("../lib/held");

function runtime() {
  const registered = {};
  return {
    registered,
    nodes: {
      createNode(node, config) {
        Object.setPrototypeOf(node, EventEmitter.prototype);
        EventEmitter.call(node);
        Object.assign(node, { id: config.id, type: config.type, status() {}, error() {}, warn() {} });
      },
      getNode: () => ({ client: () => ({}), signingSecret: () => "" }),
      registerType(type, constructor) {
        registered[type] = constructor;
      },
    },
  };
}

function fakeClaim(key, report) {
  return {
    heartbeating: false,
    toJSON: () => ({ key, token: `${key}-token`, httpStatus: 201, leaseSeconds: 30 }),
    startHeartbeat() { this.heartbeating = true; },
    stopHeartbeat() { this.heartbeating = false; },
    report,
  };
}

test("a report that fails before opsconsole answers stops the claim's heartbeats (the lease then expires)", async () => {
  const RED = runtime();
  require("../nodes/report")(RED);
  const node = {};
  RED.registered["opsconsole report"].call(node, { id: "r", type: "opsconsole report", server: "s", externalId: "payload.id" });
  const claim = fakeClaim("k-fails", () => Promise.reject(new TypeError("not a report opsconsole takes")));
  held.hold(claim, { maxHoldSeconds: 60, owner: "claim-node" });

  const failure = await new Promise((resolve) => {
    node.emit("input", { claim: claim.toJSON(), statusCode: 200, payload: {} }, () => {}, resolve);
  });
  assert.match(String(failure), /the report was not recorded/);
  assert.equal(claim.heartbeating, false, "no heartbeat holds the lease for a report that will never come");
});
