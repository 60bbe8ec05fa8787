"use strict";
// The claim node in a stand-in for Node-RED's runtime, with the real client against a fake
// opsconsole (a real HTTP server: the destination boundary): a list is claimed in batches and each
// item leaves as a single claim of it would.
const test = require("node:test");
const assert = require("node:assert/strict");
const http = require("node:http");
const { EventEmitter } = require("node:events");
const { Opsconsole } = require("opsconsole-client");
const held = require("../lib/held");

const LEASE = () => new Date(Date.now() + 30_000).toISOString();

/** A fake opsconsole: /claims/batch answers each item by `answer(item, index)`; /claims by `single`. */
async function fakeOpsconsole({ answer, single, batchStatus = 200 }) {
  const requests = [];
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => (text += chunk));
    req.on("end", () => {
      const body = text ? JSON.parse(text) : undefined;
      requests.push({ path: req.url, body });
      let status = 404;
      let reply = { status: "not_found" };
      if (req.url === "/api/v1/claims/batch") {
        status = batchStatus;
        reply = batchStatus === 200
          ? { status: "ok", results: body.claims.map((item, index) => ({ index, ...answer(item, index) })) }
          : { status: "unauthorized", detail: "no such token" };
      } else if (req.url === "/api/v1/claims" && single) {
        [status, reply] = single(body);
      } else if (req.url.endsWith("/heartbeat")) {
        [status, reply] = [200, { status: "extended", lease_expires_at: LEASE() }];
      }
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(reply));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, requests, close: () => new Promise((resolve) => server.close(resolve)) };
}

/** Claimed, done, in_progress or refused, as opsconsole answers an item of a batch. */
function claimedKey(key) {
  return { http_status: 201, status: "claimed", key, token: `${key}.tok`, attempt: 1, idempotency_key: key, lease_expires_at: LEASE() };
}

function claimNode(url, config = {}) {
  let Claim;
  const errors = [];
  const statuses = [];
  let ids = 0;
  const client = new Opsconsole({ baseUrl: url, token: "oc_unit", maxRetries: 0, heartbeatEvery: 50 });
  const RED = {
    util: {
      cloneMessage: (msg) => structuredClone(msg),
      generateId: () => `id-${++ids}`,
    },
    nodes: {
      createNode(node, nodeConfig) {
        Object.setPrototypeOf(node, EventEmitter.prototype);
        EventEmitter.call(node);
        Object.assign(node, {
          id: nodeConfig.id,
          status: (status) => statuses.push(status),
          error: (error, msg) => errors.push({ error: String(error), msg }),
          warn() {},
        });
      },
      getNode: () => ({ client: () => client }),
      registerType(_type, constructor) {
        Claim = constructor;
      },
    },
  };
  require("../nodes/claim")(RED);
  const node = {};
  Claim.call(node, { id: "claim", server: "cfg", action: "create-shipment", leaseSeconds: 30, maxHoldSeconds: 60, keyHeader: "Idempotency-Key", ...config });
  return { node, errors, statuses };
}

/** Every message the node sent for one input, as [output, msg], and how it ended. */
function run(node, msg) {
  return new Promise((resolve) => {
    const sent = [];
    node.emit(
      "input",
      msg,
      (outputs) => outputs.forEach((out, index) => out && sent.push([index, out])),
      (error) => resolve({ sent, error }),
    );
  });
}

function data(id) {
  return { invoice_id: id, customer_id: "C-7", address: "1 Quay Street" };
}

test("a list of events is one batch request; each item leaves by its own output, as a claim of it alone", async (t) => {
  const server = await fakeOpsconsole({
    answer: (item, index) =>
      [
        claimedKey(`k:${item.data.invoice_id}`),
        { http_status: 200, status: "done", key: "k:INV-2", result: { shipment: 2 }, external_id: "2" },
        { http_status: 409, status: "in_progress", key: "k:INV-1", retry_after: 7, message: "another caller holds the claim" },
        { http_status: 422, status: "blocked", reason: "invalid_input", detail: "data.address is required", errors: [{ field: "data.address" }] },
      ][index],
  });
  t.after(() => server.close());
  const { node } = claimNode(server.url);
  const items = [data("INV-1"), data("INV-2"), data("INV-1"), { invoice_id: "INV-3" }];

  const { sent, error } = await run(node, { _msgid: "m1", payload: items, deliveryId: "d-1", topic: "paid" });
  t.after(() => held.releaseAll(node));

  assert.equal(error, undefined);
  assert.deepEqual(server.requests.map((request) => request.path), ["/api/v1/claims/batch"]);
  assert.deepEqual(server.requests[0].body.claims[0], { action: "create-shipment", data: data("INV-1"), lease_seconds: 30, delivery_id: "d-1" });
  assert.deepEqual(sent.map(([output, msg]) => [output, msg.status, msg.parts.index]), [
    [0, "claimed", 0],
    [1, "done", 1],
    [2, "in_progress", 2],
    [3, "blocked", 3],
  ]);
  const [[, act], [, done], [, wait], [, person]] = sent;
  assert.deepEqual(act.payload, data("INV-1"));
  assert.deepEqual(act.headers, { "Idempotency-Key": "k:INV-1" });
  assert.equal(act.claim.token, "k:INV-1.tok");
  assert.deepEqual([done.externalId, done.result], ["2", { shipment: 2 }]);
  assert.deepEqual([wait.retryAfter, wait.delay], [7, 7000]);
  assert.deepEqual([person.reason, person.payload], ["invalid_input", { invoice_id: "INV-3" }]);
  for (const [, msg] of sent) {
    assert.equal(msg.topic, "paid", "the rest of the message travels with each item");
    assert.equal(msg._msgid, undefined, "each item is a message of its own (Node-RED gives it an id)");
    assert.deepEqual([msg.parts.id, msg.parts.count, msg.parts.type], ["id-1", 4, "array"]);
  }
  // The claimed item's lease is heartbeated, as a single claim's, until its report takes it.
  await until(() => server.requests.some((request) => request.path === "/api/v1/claims/k%3AINV-1/heartbeat"));
  const live = held.take(act.claim);
  assert.equal(live.token, "k:INV-1.tok");
  live.stopHeartbeat();
  assert.equal(held.count(), 0, "only the claimed item is held");
});

async function until(condition, timeoutMs = 2000) {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a list longer than a batch goes as several batches of at most 100, every item answered once", async (t) => {
  const server = await fakeOpsconsole({
    answer: (item) => ({ http_status: 200, status: "done", key: `k:${item.data.invoice_id}`, result: {}, external_id: "1" }),
  });
  t.after(() => server.close());
  const { node, statuses } = claimNode(server.url);
  const items = Array.from({ length: 250 }, (_, index) => data(`INV-${index}`));

  const { sent } = await run(node, { payload: items });

  assert.deepEqual(server.requests.map((request) => request.body.claims.length), [100, 100, 50]);
  assert.deepEqual(sent.map(([output, msg]) => [output, msg.parts.index]), items.map((_, index) => [1, index]));
  assert.equal(statuses.at(-1).text, "250 items: 250 done");
});

test("an item that is no event is its own error for a catch node; the others are claimed; keys are claimed by key", async (t) => {
  const server = await fakeOpsconsole({ answer: (item) => claimedKey(item.key ?? `k:${item.data.invoice_id}`) });
  t.after(() => server.close());
  const { node, errors } = claimNode(server.url);

  const events = await run(node, { payload: [data("INV-1"), "not an object", [1]] });
  const keys = await run(node, { key: ["k:A", "", "k:B"], payload: { kept: true } });
  held.releaseAll(node);

  assert.deepEqual(events.sent.map(([output, msg]) => [output, msg.parts.index]), [[0, 0]]);
  assert.deepEqual(keys.sent.map(([output, msg]) => [output, msg.key, msg.parts.index]), [[0, "k:A", 0], [0, "k:B", 2]]);
  assert.deepEqual(server.requests.map((request) => request.body.claims), [
    [{ action: "create-shipment", data: data("INV-1"), lease_seconds: 30 }],
    [{ key: "k:A", lease_seconds: 30 }, { key: "k:B", lease_seconds: 30 }],
  ]);
  assert.deepEqual(errors.map(({ error, msg }) => [error, msg.parts.index]), [
    ["Error: msg.payload must be the event's data, an object", 1],
    ["Error: msg.payload must be the event's data, an object", 2],
    ["Error: msg.key must be an operation's key", 1],
  ]);
  assert.equal(events.error, undefined);
});

test("a batch refused whole leaves every item by 'a person must decide'; unreachable, by 'wait'", async (t) => {
  const server = await fakeOpsconsole({ answer: () => ({}), batchStatus: 401 });
  t.after(() => server.close());

  const refused = await run(claimNode(server.url).node, { payload: [data("INV-1"), data("INV-2")] });
  assert.deepEqual(refused.sent.map(([output, msg]) => [output, msg.status]), [[3, "unauthorized"], [3, "unauthorized"]]);

  const closed = await fakeOpsconsole({ answer: () => ({}) });
  await closed.close();
  const unreachable = await run(claimNode(closed.url).node, { payload: [data("INV-1"), data("INV-2")] });
  assert.deepEqual(unreachable.sent.map(([output, msg]) => [output, msg.status]), [[2, "unavailable"], [2, "unavailable"]]);
});

test("a single event is one claim, as before a list was taken: no batch, no parts", async (t) => {
  const server = await fakeOpsconsole({ answer: () => ({}), single: () => [201, claimedKey("k:INV-1")] });
  t.after(() => server.close());
  const { node } = claimNode(server.url);

  const { sent } = await run(node, { _msgid: "m1", payload: data("INV-1") });
  held.releaseAll(node);

  assert.deepEqual(server.requests.map((request) => request.path), ["/api/v1/claims"]);
  const [[output, msg]] = sent;
  assert.deepEqual([output, msg._msgid, msg.parts], [0, "m1", undefined]);
});

test("a list without an action is the message's error, and nothing is claimed", async (t) => {
  const server = await fakeOpsconsole({ answer: () => ({}) });
  t.after(() => server.close());

  const { sent, error } = await run(claimNode(server.url, { action: "" }).node, { payload: [data("INV-1")] });

  assert.match(String(error), /no action/);
  assert.deepEqual([sent, server.requests], [[], []]);
});
