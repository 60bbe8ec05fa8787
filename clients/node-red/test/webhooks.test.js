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
