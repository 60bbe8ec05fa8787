// The Opsconsole node run as n8n runs it (execute() with a context), against a fake opsconsole:
// which output each claim answer takes, what a report sends for each vendor answer, and the errors.
const assert = require("node:assert/strict");
const { after, before, beforeEach, describe, it } = require("node:test");

const { Opsconsole } = require("../dist/nodes/Opsconsole/Opsconsole.node.js");
const { heldCount } = require("../dist/nodes/Opsconsole/heartbeats.js");
const { KEY, TOKEN, claimed, executeContext, fakeOpsconsole } = require("./helpers.cjs");

const ACT = 0;
const DONE = 1;
const WAIT = 2;
const PERSON = 3;
const DATA = { invoice_id: "INV-7", customer_id: "C-7", address: "1 Quay Street" };

let server;
before(async () => {
  server = await fakeOpsconsole();
});
after(() => server.close());
beforeEach(() => server.reset());

function run(parameters, options = {}) {
  return new Opsconsole().execute.call(executeContext({ url: server.url, parameters, ...options }));
}

const claiming = { resource: "claim", operation: "claim", action: "create-shipment", data: DATA, leaseSeconds: 30, heartbeatLimitSeconds: 0 };

/** The one output that got an item, and that item's json. */
function routed(outputs) {
  const filled = outputs.map((items, index) => [index, items]).filter(([, items]) => items.length);
  assert.equal(filled.length, 1, `one output has the item: ${JSON.stringify(outputs)}`);
  const [[index, [item]]] = filled;
  return [index, item.json];
}

describe("the claim's outputs", () => {
  it("a 201 goes to Act with the idempotency key, the data and the claim to report with", async () => {
    server.on("POST /api/v1/claims", claimed());
    const [output, json] = routed(await run({ ...claiming, deliveryId: "exec-1" }));
    assert.equal(output, ACT);
    assert.equal(json.idempotencyKey, KEY);
    assert.deepEqual(json.data, DATA);
    assert.equal(json.claim.token, "tok-1");
    const [request] = server.requests;
    assert.deepEqual(request.body, { action: "create-shipment", data: DATA, lease_seconds: 30, delivery_id: "exec-1" });
    assert.equal(request.headers.authorization, `Bearer ${TOKEN}`);
  });

  it("data given as JSON text is sent as the object", async () => {
    server.on("POST /api/v1/claims", claimed());
    routed(await run({ ...claiming, data: JSON.stringify(DATA) }));
    assert.deepEqual(server.requests[0].body.data, DATA);
  });

  it("a 200 done goes to Done with the recorded result and record id, and nothing acts", async () => {
    server.on("POST /api/v1/claims", { status: 200, body: { status: "done", key: KEY, result: { shipment: 4 }, external_id: "4" } });
    const [output, json] = routed(await run(claiming));
    assert.equal(output, DONE);
    assert.deepEqual([json.externalId, json.result], ["4", { shipment: 4 }]);
  });

  for (const [status, httpStatus] of [["in_progress", 409], ["retry_later", 409], ["waiting", 409], ["held", 423]]) {
    it(`${httpStatus} ${status} goes to Wait with the Retry-After seconds`, async () => {
      server.on("POST /api/v1/claims", { status: httpStatus, headers: { "Retry-After": "7" }, body: { status, key: KEY, retry_after: 7 } });
      const [output, json] = routed(await run(claiming));
      assert.equal(output, WAIT);
      assert.equal(json.retryAfter, 7);
    });
  }

  for (const status of ["unknown", "needs_review", "awaiting_approval", "cancelled", "rejected", "superseded", "blocked", "a_status_from_a_newer_server"]) {
    it(`409 ${status} goes to Person: never act`, async () => {
      server.on("POST /api/v1/claims", { status: 409, body: { status, key: KEY, message: `it is ${status}` } });
      const [output, json] = routed(await run(claiming));
      assert.equal(output, PERSON);
      assert.equal(json.status, status);
      assert.equal(json.message, `it is ${status}`);
    });
  }

  it("a claim by key sends the key and Act carries the operation's data from the answer", async () => {
    server.on("POST /api/v1/claims", claimed({ data: DATA }));
    const [output, json] = routed(await run({ resource: "claim", operation: "claimByKey", key: KEY, leaseSeconds: 60, heartbeatLimitSeconds: 0 }));
    assert.equal(output, ACT);
    assert.deepEqual(json.data, DATA);
    assert.deepEqual(server.requests[0].body, { key: KEY, lease_seconds: 60 });
  });

  it("a 201 keeps the claim alive until its report, which lets it go", async () => {
    server.on("POST /api/v1/claims", claimed());
    server.on(`POST /api/v1/claims/${encodeURIComponent(KEY)}/outcome`, { status: 200, body: { status: "recorded", state: "succeeded" } });
    const [, act] = routed(await run({ ...claiming, heartbeatLimitSeconds: 600 }));
    assert.equal(heldCount(), 1);
    await run(reporting(act.claim, { statusCode: 201, externalId: "4" }));
    assert.equal(heldCount(), 0);
  });
});

function reporting(claim, vendor) {
  return { resource: "claim", operation: "report", claim, statusCode: "", headers: {}, vendorError: "", externalId: "", result: "{}", ...vendor };
}

async function reported(vendor) {
  server.on("POST /api/v1/claims", claimed());
  const [, act] = routed(await run(claiming));
  const outcomePath = `/api/v1/claims/${encodeURIComponent(KEY)}/outcome`;
  server.on(`POST ${outcomePath}`, { status: 200, body: { status: "recorded", state: "whatever the server says" } });
  const [[item]] = await run(reporting(act.claim, vendor));
  const sent = server.requests.find((request) => request.path === outcomePath);
  return [sent.body, item.json];
}

describe("the report, from the vendor's answer", () => {
  it("a 2xx is succeeded with the record id and the result", async () => {
    const [sent, json] = await reported({ statusCode: 201, externalId: 4, result: { shipment: 4 } });
    assert.deepEqual(sent, { token: "tok-1", outcome: "succeeded", external_id: "4", result: { shipment: 4 } });
    assert.equal(json.status, "recorded");
  });

  it("a 429 with Retry-After is failed, transient, retried after it", async () => {
    const [sent, json] = await reported({ statusCode: 429, headers: { "retry-after": "3" } });
    assert.deepEqual([sent.outcome, sent.category, sent.retry_after], ["failed", "transient", 3]);
    assert.equal(json.retryAfter, 3);
  });

  it("a 400 is failed, permanent: a person decides", async () => {
    const [sent] = await reported({ statusCode: 400 });
    assert.deepEqual([sent.outcome, sent.category], ["failed", "permanent"]);
  });

  for (const status of [408, 500, 502, 504]) {
    it(`a ${status} is unknown: the vendor may have acted`, async () => {
      const [sent] = await reported({ statusCode: status });
      assert.equal(sent.outcome, "unknown");
    });
  }

  it("the HTTP Request node's timeout (its error item) is unknown, never failed", async () => {
    const [sent] = await reported({ statusCode: "", vendorError: { message: "timeout of 8000ms exceeded", code: "ECONNABORTED" } });
    assert.equal(sent.outcome, "unknown");
    assert.match(sent.error, /ECONNABORTED: timeout of 8000ms exceeded/);
  });

  it("the error's other fields (the request n8n kept, with the payload) are never sent", async () => {
    const [sent] = await reported({ vendorError: { message: "socket hang up", code: "ECONNRESET", config: { data: "{\"address\":\"1 Quay Street\"}" } } });
    assert.doesNotMatch(JSON.stringify(sent), /Quay Street/);
  });

  it("a reset is unknown", async () => {
    const [sent] = await reported({ vendorError: { message: "socket hang up", code: "ECONNRESET" } });
    assert.equal(sent.outcome, "unknown");
  });

  it("a refused connection never reached the vendor: failed, transient", async () => {
    const [sent] = await reported({ vendorError: { message: "connect ECONNREFUSED 127.0.0.1:9", code: "ECONNREFUSED" } });
    assert.deepEqual([sent.outcome, sent.category], ["failed", "transient"]);
  });

  it("an error with no code is unknown", async () => {
    const [sent] = await reported({ vendorError: "The connection was aborted" });
    assert.equal(sent.outcome, "unknown");
  });

  it("a report without a claim is refused, saying what to set", async () => {
    await assert.rejects(run(reporting(undefined, { statusCode: 201 })), /Claim is not a claim to report/);
    await assert.rejects(run(reporting("not json", { statusCode: 201 })), /Claim is not valid JSON/);
    assert.equal(server.requests.length, 0);
  });

  it("a report answered stale_token fails the node, naming it", async () => {
    server.on("POST /api/v1/claims", claimed());
    const [, act] = routed(await run(claiming));
    server.on(`POST /api/v1/claims/${encodeURIComponent(KEY)}/outcome`, { status: 409, body: { status: "stale_token", key: KEY, message: "the lease expired", state: "unknown" } });
    await assert.rejects(run(reporting(act.claim, { statusCode: 201 })), /stale|lease/);
  });
});

describe("errors", () => {
  it("a refusal says what opsconsole said, and never the token", async () => {
    server.on("POST /api/v1/claims", { status: 401, body: { status: "unauthorized", detail: "no such token" } });
    await assert.rejects(run(claiming), (error) => {
      assert.match(error.message, /opsconsole refused \(401/);
      assert.doesNotMatch(error.message, new RegExp(TOKEN));
      return true;
    });
  });

  it("data that is not an object is refused before anything is sent", async () => {
    await assert.rejects(run({ ...claiming, data: "[1, 2]" }), /Data must be a JSON object/);
    assert.equal(server.requests.length, 0);
  });

  it("with Continue On Fail, a failed claim is an item on Person, not Act", async () => {
    server.on("POST /api/v1/claims", { status: 403, body: { status: "refused", reason: "missing_scope", detail: "needs claims" } });
    const outputs = await run(claiming, { continueOnFail: true });
    assert.deepEqual(outputs[ACT], []);
    assert.match(outputs[PERSON][0].json.error, /missing_scope/);
  });
});

describe("the management operations", () => {
  it("approve sends the fingerprint and the reason to the key's path", async () => {
    const path = `/api/v1/operations/${encodeURIComponent(KEY)}/approve`;
    server.on(`POST ${path}`, { status: 200, body: { status: "approved", message: "Approved." } });
    const [[item]] = await run({ resource: "operation", operation: "approve", key: KEY, fingerprint: "f1", reason: "ok" });
    assert.equal(item.json.status, "approved");
    assert.deepEqual(server.requests[0].body, { fingerprint: "f1", reason: "ok" });
  });

  it("a refused approval (four eyes) fails the node with the reason", async () => {
    server.on(`POST /api/v1/operations/${encodeURIComponent(KEY)}/approve`, { status: 403, body: { status: "refused", reason: "four_eyes", detail: "you submitted it" } });
    await assert.rejects(run({ resource: "operation", operation: "approve", key: KEY, fingerprint: "f1" }), /403 four_eyes\): you submitted it/);
  });

  it("due work is one item per operation", async () => {
    server.on("GET /api/v1/claims/due", { status: 200, body: { status: "ok", operations: [{ key: "a" }, { key: "b" }], next_cursor: null } });
    const [items] = await run({ resource: "due", operation: "list", action: "create-shipment", limit: 10 });
    assert.deepEqual(items.map((item) => item.json.key), ["a", "b"]);
    assert.match(server.requests[0].url, /action=create-shipment/);
  });

  it("a pause of an action sends its scope, action and reason", async () => {
    server.on("POST /api/v1/pauses", { status: 201, body: { pauses: [{ id: 7 }] } });
    await run({ resource: "pause", operation: "create", scope: "action", action: "create-shipment", reason: "vendor incident" });
    assert.deepEqual(server.requests[0].body, { scope: "action", reason: "vendor incident", action: "create-shipment" });
  });

  it("an event is submitted with its action and data", async () => {
    server.on("POST /api/v1/events", { status: 201, body: { status: "accepted", key: KEY } });
    const [[item]] = await run({ resource: "event", operation: "submit", action: "create-shipment", data: DATA });
    assert.deepEqual([item.json.status, item.json.httpStatus], ["accepted", 201]);
  });
});

describe("the node's description", () => {
  it("a claim has four outputs named for what the flow does; the other operations one", () => {
    const { outputs } = new Opsconsole().description;
    assert.match(outputs, /"displayName":"Act".*"displayName":"Done".*"displayName":"Wait".*"displayName":"Person"/);
  });
});

describe("blocked claims", () => {
  it("422 invalid_input goes to Person with what is wrong: the data must be fixed", async () => {
    server.on("POST /api/v1/claims", { status: 422, body: { status: "blocked", reason: "invalid_input", detail: "data.address is required", errors: [{ field: "data.address" }] } });
    const [output, json] = routed(await run(claiming));
    assert.equal(output, PERSON);
    assert.deepEqual([json.reason, json.message], ["invalid_input", "data.address is required"]);
  });
});

describe("what a review found (each failed before its fix)", () => {
  it("a credential URL with a user and password is a clear error that never repeats the password", async () => {
    const url = server.url.replace("http://", "http://ann:s3cret-pass@");
    await assert.rejects(run(claiming, { url }), (error) => {
      assert.match(error.message, /URL must not carry a user or a password/);
      assert.doesNotMatch(`${error.message} ${error.description ?? ""}`, /s3cret-pass/);
      return true;
    });
    assert.equal(server.requests.length, 0);
  });

  for (const limit of [-1, 10 ** 9, "soon", 1.5e308]) {
    it(`a heartbeat limit of ${limit} is refused before anything is claimed`, async () => {
      server.on("POST /api/v1/claims", claimed());
      await assert.rejects(run({ ...claiming, heartbeatLimitSeconds: limit }), /Keep the Claim Alive For at Most/);
      assert.equal(server.requests.length, 0, "nothing claimed: no claim left to expire to unknown");
      assert.equal(heldCount(), 0);
    });
  }

  for (const result of ["[1, 2]", "\"shipped\"", [1, 2]]) {
    it(`a 2xx whose Result is not an object (${JSON.stringify(result)}) is still reported succeeded, and lets the claim go`, async () => {
      server.on("POST /api/v1/claims", claimed());
      const [, act] = routed(await run({ ...claiming, heartbeatLimitSeconds: 600 }));
      const outcomePath = `/api/v1/claims/${encodeURIComponent(KEY)}/outcome`;
      server.on(`POST ${outcomePath}`, { status: 200, body: { status: "recorded", state: "succeeded" } });
      await run(reporting(act.claim, { statusCode: 201, externalId: "4", result }));
      const sent = server.requests.find((request) => request.path === outcomePath);
      assert.deepEqual(sent.body, { token: "tok-1", outcome: "succeeded", external_id: "4" });
      assert.equal(heldCount(), 0);
    });
  }

  it("the vendor's URL in an error's text is cut to its origin: a key in its path, query or user part is never sent", async () => {
    const message = "Invalid redirect location received from server: https://user:pw@vendor.example/v1/sk_live_42/ship?api_key=k-77";
    const [sent] = await reported({ vendorError: { message, code: "ERR_INVALID_URL" } });
    assert.equal(sent.outcome, "unknown");
    assert.match(sent.error, /https:\/\/vendor\.example/);
    assert.doesNotMatch(sent.error, /sk_live_42|k-77|pw@/);
  });

  it("a claim node failing on a later item's parameters fails before anything is claimed", async () => {
    // Before the items were claimed in batches, item 0 was claimed first and then given back.
    const items = [{ json: {} }, { json: {} }];
    const parameters = (index) => ({ ...claiming, heartbeatLimitSeconds: 600, data: index === 0 ? DATA : "[1]" });
    server.on("POST /api/v1/claims", claimed());
    await assert.rejects(run(parameters, { items }), (error) => {
      assert.match(error.message, /Data must be a JSON object/);
      assert.equal(error.itemIndex, 1);
      return true;
    });
    assert.deepEqual(server.requests, [], "nothing claimed: nothing to give back");
    assert.equal(heldCount(), 0);
  });
});

describe("a Report on many items (a review found the later ones dropped)", () => {
  it("one item's refused report does not keep the others from being reported; the node then fails", async () => {
    server.on("POST /api/v1/claims", claimed());
    const [, act] = routed(await run(claiming));
    const other = { ...act.claim, key: "demo:INV-8:create-shipment", token: "tok-2", idempotencyKey: "demo:INV-8:create-shipment" };
    const path = (key) => `/api/v1/claims/${encodeURIComponent(key)}/outcome`;
    server.on(`POST ${path(KEY)}`, { status: 409, body: { status: "stale_token", key: KEY, message: "the lease expired", state: "unknown" } });
    server.on(`POST ${path(other.key)}`, { status: 200, body: { status: "recorded", state: "succeeded" } });
    const items = [{ json: {} }, { json: {} }];
    const parameters = (index) => reporting(index === 0 ? act.claim : other, { statusCode: 201, externalId: String(index) });
    await assert.rejects(run(parameters, { items }), /stale|lease/);
    const sent = server.requests.find((request) => request.path === path(other.key));
    assert.ok(sent, "the second item's success was reported");
    assert.deepEqual([sent.body.outcome, sent.body.external_id], ["succeeded", "1"]);
  });
});

describe("operation names every object has", () => {
  for (const [resource, operation] of [["operation", "constructor"], ["__proto__", "toString"], ["claim", "hasOwnProperty"]]) {
    it(`${resource} › ${operation} is the clear unknown-operation error, and sends nothing`, async () => {
      await assert.rejects(run({ resource, operation, key: KEY }), /unknown operation/);
      assert.equal(server.requests.length, 0);
    });
  }
});

/** A batch's answer: each item's result by `answer(item, index)`, as opsconsole gives them. */
function batchOf(answer) {
  return (body) => ({ status: 200, body: { status: "ok", results: body.claims.map((item, index) => ({ index, ...answer(item, index) })) } });
}

function claimedItem(key) {
  return { http_status: 201, ...claimed({ key, token: `${key}.tok`, idempotency_key: key }).body };
}

const dataOf = (index) => ({ ...DATA, invoice_id: `INV-${index}` });

describe("many items: claimed in batches", () => {
  it("the items go as one batch request, and each leaves by the output a claim of it alone would take, paired with its item", async () => {
    server.on("POST /api/v1/claims/batch", batchOf((item, index) => [
      claimedItem(`k:${item.data.invoice_id}`),
      { http_status: 200, status: "done", key: "k:INV-1", result: { shipment: 4 }, external_id: "4" },
      { http_status: 409, status: "in_progress", key: "k:INV-0", retry_after: 7, message: "another caller holds the claim" },
      { http_status: 422, status: "blocked", reason: "invalid_input", detail: "data.address is required", errors: [{ field: "data.address" }] },
    ][index]));
    const items = [0, 1, 2, 3].map(() => ({ json: {} }));
    const parameters = (index) => ({ ...claiming, data: index === 2 ? dataOf(0) : dataOf(index), deliveryId: `exec-${index}`, heartbeatLimitSeconds: 600 });

    const outputs = await run(parameters, { items });

    assert.deepEqual(server.requests.map((request) => request.path), ["/api/v1/claims/batch"]);
    assert.deepEqual(server.requests[0].body.claims[1], { action: "create-shipment", data: dataOf(1), lease_seconds: 30, delivery_id: "exec-1" });
    assert.deepEqual(outputs.map((items) => items.map((item) => item.pairedItem.item)), [[0], [1], [2], [3]]);
    const [[act], [done], [wait], [person]] = outputs;
    assert.deepEqual([act.json.status, act.json.httpStatus, act.json.idempotencyKey, act.json.claim.token], ["claimed", 201, "k:INV-0", "k:INV-0.tok"]);
    assert.deepEqual(act.json.data, dataOf(0));
    assert.deepEqual([done.json.externalId, done.json.result], ["4", { shipment: 4 }]);
    assert.deepEqual([wait.json.status, wait.json.retryAfter], ["in_progress", 7]);
    assert.deepEqual([person.json.status, person.json.reason, person.json.httpStatus], ["blocked", "invalid_input", 422]);
    assert.equal(heldCount(), 1, "the claimed item is kept alive until its report, as a single claim");

    server.on(`POST /api/v1/claims/${encodeURIComponent("k:INV-0")}/outcome`, { status: 200, body: { status: "recorded", state: "succeeded" } });
    await run(reporting(act.json.claim, { statusCode: 201, externalId: "4" }));
    assert.equal(heldCount(), 0);
  });

  it("more items than a batch takes go as batches of at most 100, in order", async () => {
    server.on("POST /api/v1/claims/batch", batchOf((item) => ({ http_status: 200, status: "done", key: `k:${item.data.invoice_id}`, result: {} })));
    const items = Array.from({ length: 250 }, () => ({ json: {} }));

    const outputs = await run((index) => ({ ...claiming, data: dataOf(index) }), { items });

    assert.deepEqual(server.requests.map((request) => request.body.claims.length), [100, 100, 50]);
    assert.deepEqual(outputs[DONE].map((item) => [item.pairedItem.item, item.json.key]), items.map((_, index) => [index, `k:INV-${index}`]));
  });

  it("claims by key send the keys, and Act carries each operation's data from its answer", async () => {
    server.on("POST /api/v1/claims/batch", batchOf((item) => ({ ...claimedItem(item.key), data: { for: item.key } })));
    const outputs = await run((index) => ({ resource: "claim", operation: "claimByKey", key: `k:${index}`, leaseSeconds: 60, heartbeatLimitSeconds: 0 }), { items: [{ json: {} }, { json: {} }] });
    assert.deepEqual(server.requests[0].body.claims, [{ key: "k:0", lease_seconds: 60 }, { key: "k:1", lease_seconds: 60 }]);
    assert.deepEqual(outputs[ACT].map((item) => item.json.data), [{ for: "k:0" }, { for: "k:1" }]);
  });

  it("an item refused (not blocked) fails the node naming it, and the batch's claims are given back", async () => {
    server.on("POST /api/v1/claims/batch", batchOf((item, index) =>
      index === 1 ? { http_status: 404, status: "not_found", detail: "no operation has this key" } : claimedItem(item.key)));
    const outcome = (key) => `/api/v1/claims/${encodeURIComponent(key)}/outcome`;
    for (const key of ["k:0", "k:2"]) server.on(`POST ${outcome(key)}`, { status: 200, body: { status: "recorded", state: "retrying" } });
    const parameters = (index) => ({ resource: "claim", operation: "claimByKey", key: `k:${index}`, leaseSeconds: 60, heartbeatLimitSeconds: 600 });

    await assert.rejects(run(parameters, { items: [{ json: {} }, { json: {} }, { json: {} }] }), (error) => {
      assert.match(error.message, /opsconsole refused \(404 not_found\)/);
      assert.equal(error.itemIndex, 1);
      return true;
    });

    const givenBack = server.requests.filter((request) => request.path.endsWith("/outcome"));
    assert.deepEqual(givenBack.map((request) => [request.path, request.body.outcome, request.body.category]), [
      [outcome("k:0"), "failed", "transient"],
      [outcome("k:2"), "failed", "transient"],
    ]);
    assert.equal(heldCount(), 0);
  });

  it("with Continue On Fail, a batch refused whole is an error item on Person for each of its items", async () => {
    server.on("POST /api/v1/claims/batch", { status: 401, body: { status: "unauthorized", detail: "no such token" } });
    const outputs = await run((index) => ({ ...claiming, data: dataOf(index) }), { items: [{ json: {} }, { json: {} }], continueOnFail: true });
    assert.deepEqual(outputs[PERSON].map((item) => [item.pairedItem.item, /401/.test(item.json.error)]), [[0, true], [1, true]]);
    assert.deepEqual(outputs.slice(0, PERSON), [[], [], []]);
  });

  it("with Continue On Fail, an item whose parameters are wrong is an error item in its place; the others are claimed", async () => {
    server.on("POST /api/v1/claims/batch", batchOf((item) => ({ http_status: 200, status: "done", key: `k:${item.data.invoice_id}`, result: {} })));
    const parameters = (index) => ({ ...claiming, data: index === 1 ? "[1]" : dataOf(index) });
    const outputs = await run(parameters, { items: [{ json: {} }, { json: {} }, { json: {} }], continueOnFail: true });
    assert.deepEqual(server.requests[0].body.claims.map((claim) => claim.data.invoice_id), ["INV-0", "INV-2"]);
    assert.deepEqual(outputs[DONE].map((item) => item.pairedItem.item), [0, 2]);
    assert.deepEqual(outputs[PERSON].map((item) => [item.pairedItem.item, item.json.error]), [[1, "Data must be a JSON object"]]);
  });
});
