// The Opsconsole Trigger's webhook: a notification signed as opsconsole signs them (Standard
// Webhooks) starts one run; a bad, missing or old signature, or a repeat, starts none.
const assert = require("node:assert/strict");
const { createHmac } = require("node:crypto");
const { describe, it } = require("node:test");

const { OpsconsoleTrigger } = require("../dist/nodes/OpsconsoleTrigger/OpsconsoleTrigger.node.js");
const { webhookContext } = require("./helpers.cjs");

const SECRET = "whsec_" + Buffer.from("a signing secret of the unit tests").toString("base64");
const BODY = JSON.stringify({
  type: "operation.due",
  timestamp: "2026-12-05T08:00:00+00:00",
  data: { workspace: "demo", key: "demo:INV-7:create-shipment", action: "create-shipment", state: "retrying" },
});

function signed(body, { id = "demo:1:2:operation.due", at = Math.floor(Date.now() / 1000), secret = SECRET } = {}) {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const signature = createHmac("sha256", key).update(`${id}.${at}.${body}`).digest("base64");
  return { "webhook-id": id, "webhook-timestamp": String(at), "webhook-signature": `v1,${signature}` };
}

function receive(headers, options = {}) {
  const { context, response } = webhookContext({ secret: SECRET, headers, rawBody: options.body ?? BODY, ...options });
  return new OpsconsoleTrigger().webhook.call(context).then((result) => ({ result, response }));
}

describe("the trigger", () => {
  it("a signed operation.due starts the workflow with the operation's key", async () => {
    const { result } = await receive(signed(BODY));
    const [[item]] = result.workflowData;
    assert.equal(item.json.key, "demo:INV-7:create-shipment");
    assert.equal(item.json.type, "operation.due");
    assert.equal(item.json.webhookId, "demo:1:2:operation.due");
  });

  it("a signature by another secret is refused 401 and starts nothing", async () => {
    const other = "whsec_" + Buffer.from("someone else's secret").toString("base64");
    const { result, response } = await receive(signed(BODY, { secret: other }));
    assert.equal(response.statusCode, 401);
    assert.equal(result.workflowData, undefined);
    assert.match(response.body.detail, /no v1 signature matches/);
    assert.doesNotMatch(JSON.stringify(response.body), /whsec_/);
  });

  it("a body changed after signing is refused", async () => {
    const { response } = await receive(signed(BODY), { body: BODY.replace("INV-7", "INV-8") });
    assert.equal(response.statusCode, 401);
  });

  it("a notification without its signature headers is refused, naming them", async () => {
    const { response } = await receive({});
    assert.equal(response.statusCode, 401);
    assert.match(response.body.detail, /missing webhook-id/);
  });

  it("a timestamp more than five minutes old is refused (a replay)", async () => {
    const { response } = await receive(signed(BODY, { at: Math.floor(Date.now() / 1000) - 301 }));
    assert.equal(response.statusCode, 401);
    assert.match(response.body.detail, /5 minutes/);
  });

  it("the same webhook-id twice starts one run", async () => {
    const staticData = {};
    const first = await receive(signed(BODY), { staticData });
    const second = await receive(signed(BODY), { staticData });
    assert.equal(first.result.workflowData.length, 1);
    assert.equal(second.result.workflowData, undefined);
    assert.deepEqual(second.result.webhookResponse, { status: "ignored" });
  });

  it("an event the node is not set to is acknowledged and starts nothing", async () => {
    const body = BODY.replace("operation.due", "operation.needs_review");
    const { result } = await receive(signed(body), { body });
    assert.equal(result.workflowData, undefined);
  });

  it("a credential without a signing secret refuses every notification", async () => {
    const { response } = await receive(signed(BODY), { secret: "" });
    assert.equal(response.statusCode, 500);
    assert.match(response.body.detail, /no notification signing secret/);
  });
});

describe("the trigger's action (a review found it ignored)", () => {
  it("a notification of another action is acknowledged and starts nothing", async () => {
    const body = BODY.replace('"action":"create-shipment"', '"action":"charge-card"');
    const { result } = await receive(signed(body), { body, action: "create-shipment" });
    assert.equal(result.workflowData, undefined);
    assert.deepEqual(result.webhookResponse, { status: "ignored" });
  });

  it("a notification of its action starts the run", async () => {
    const { result } = await receive(signed(BODY), { action: "create-shipment" });
    assert.equal(result.workflowData[0][0].json.key, "demo:INV-7:create-shipment");
  });
});
