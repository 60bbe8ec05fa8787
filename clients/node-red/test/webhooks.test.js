"use strict";
// The due node's Standard Webhooks check, against signatures made as the spec says.
const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { verify, sign, SignatureError } = require("../lib/webhooks");

const SECRET = `whsec_${Buffer.from("a signing secret of the tests").toString("base64")}`;
const BODY = '{"type":"operation.due","data":{"key":"demo:INV-7:create-shipment"}}';
const NOW = 1_780_000_000_000;

function headers(signature, { id = "msg-1", timestamp = String(NOW / 1000) } = {}) {
  return { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature };
}

function specSignature(secret, id, timestamp, body) {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  return `v1,${crypto.createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
}

test("a signature made as the spec says verifies, and gives the body", () => {
  const signature = specSignature(SECRET, "msg-1", String(NOW / 1000), BODY);
  assert.equal(sign(SECRET, "msg-1", String(NOW / 1000), BODY), signature);
  const verified = verify(SECRET, Buffer.from(BODY), headers(signature), { now: NOW });
  assert.equal(verified.id, "msg-1");
  assert.equal(verified.body.data.key, "demo:INV-7:create-shipment");
});

test("any one of several signatures may match (a secret being rotated)", () => {
  const good = specSignature(SECRET, "msg-1", String(NOW / 1000), BODY);
  assert.ok(verify(SECRET, BODY, headers(`v1,AAAA ${good}`), { now: NOW }));
});

test("a changed body, another secret, an old timestamp or no headers are refused", () => {
  const good = specSignature(SECRET, "msg-1", String(NOW / 1000), BODY);
  const other = `whsec_${Buffer.from("another secret").toString("base64")}`;
  assert.throws(() => verify(SECRET, `${BODY} `, headers(good), { now: NOW }), SignatureError);
  assert.throws(() => verify(other, BODY, headers(good), { now: NOW }), SignatureError);
  assert.throws(() => verify(SECRET, BODY, headers(good), { now: NOW + 6 * 60 * 1000 }), /five minutes/);
  assert.throws(() => verify(SECRET, BODY, {}, { now: NOW }), /missing/);
});

test("a secret that is not a whsec_ one is a clear error", () => {
  assert.throws(() => verify("", BODY, headers("v1,x"), { now: NOW }), /whsec_/);
  assert.throws(() => verify("plain", BODY, headers("v1,x"), { now: NOW }), /whsec_/);
});

test("a due notification becomes a message with its key; another type, no key, or another action than the node's: none", () => {
  const { dueMessage } = require("../lib/webhooks");
  const due = (data, type = "operation.due") => ({ id: "w1", body: { type, data } });
  const data = { key: "demo:INV-1:v1:create-shipment", action: "create-shipment" };
  assert.deepEqual(dueMessage(due(data), ""), {
    key: data.key,
    action: "create-shipment",
    payload: { type: "operation.due", data },
    webhookId: "w1",
  });
  assert.equal(dueMessage(due(data), "create-shipment").key, data.key);
  // One subscription sends the due work of every caller action of the workspace: a flow that
  // performs create-shipment must not claim (and perform) a charge.
  assert.equal(dueMessage(due({ key: "demo:C-1:v1:charge", action: "charge" }), "create-shipment"), undefined);
  assert.equal(dueMessage(due(data, "operation.needs_review"), ""), undefined);
  assert.equal(dueMessage(due({ action: "create-shipment" }), ""), undefined);
  assert.equal(dueMessage({ id: "w2", body: null }, ""), undefined);
});
