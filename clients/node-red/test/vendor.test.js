"use strict";
// What the report node reports for the message Node-RED's `http request` node sends on.
const test = require("node:test");
const assert = require("node:assert/strict");
const { outcomeOfMessage } = require("../lib/vendor");

const properties = { externalIdFrom: "payload.id", resultFrom: "" };

test("an answer: 2xx succeeded with the record id, 429 transient, 400 permanent, 5xx unknown", () => {
  assert.deepEqual(outcomeOfMessage({ statusCode: 201, payload: { id: 7 }, headers: {} }, properties), {
    outcome: "succeeded",
    externalId: "7",
  });
  const limited = outcomeOfMessage({ statusCode: 429, headers: { "retry-after": "3" } }, properties);
  assert.deepEqual([limited.outcome, limited.category, limited.retryAfter], ["failed", "transient", 3]);
  assert.equal(outcomeOfMessage({ statusCode: 400, headers: {} }, properties).category, "permanent");
  assert.equal(outcomeOfMessage({ statusCode: 502, headers: {} }, properties).outcome, "unknown");
});

test("an error code instead of a status: a timeout or a reset is unknown, a refused connection transient", () => {
  const error = (code) => ({ statusCode: code, payload: `RequestError: ${code} : http://vendor.test/shipments` });
  assert.equal(outcomeOfMessage(error("ETIMEDOUT"), properties).outcome, "unknown");
  assert.equal(outcomeOfMessage(error("ECONNRESET"), properties).outcome, "unknown");
  assert.equal(outcomeOfMessage(error("DEPTH_ZERO_SELF_SIGNED_CERT"), properties).outcome, "unknown");
  assert.equal(outcomeOfMessage(error("ECONNREFUSED"), properties).category, "transient");
  assert.equal(outcomeOfMessage({}, properties).outcome, "unknown", "no status at all: it may have been sent");
});

test("the vendor's URL in the http request node's error text is reported as its origin only", () => {
  // Node-RED puts `${error} : ${url}` in msg.payload; a URL may carry a key in its query, its
  // path (a Slack or Telegram hook) or its user part. opsconsole keeps and shows the error text.
  const outcome = outcomeOfMessage(
    {
      statusCode: "ECONNREFUSED",
      payload:
        "RequestError: connect ECONNREFUSED 127.0.0.1:1 : https://user:pa55@vendor.test:8443/bot123:SECRET/send?api_key=SECRET2#x",
    },
    properties,
  );
  assert.equal(outcome.outcome, "failed");
  assert.doesNotMatch(outcome.error, /SECRET|pa55|user|bot123/);
  assert.match(outcome.error, /ECONNREFUSED/);
  assert.match(outcome.error, /https:\/\/vendor\.test:8443/);
});

test("after a redirect the http request node followed, only a 2xx is taken: any other answer is unknown", () => {
  // A 303 after the vendor created the record, then a 429, 404 or 401 to the GET that followed:
  // the status is not the answer to our call, and a retry would create a second record.
  const redirected = { redirectList: [{ location: "https://vendor.test/shipments/9" }], headers: {} };
  for (const statusCode of [429, 404, 401, 400]) {
    assert.equal(outcomeOfMessage({ ...redirected, statusCode }, properties).outcome, "unknown", String(statusCode));
  }
  assert.equal(outcomeOfMessage({ ...redirected, statusCode: 200, payload: { id: 9 } }, properties).outcome, "succeeded");
  assert.equal(outcomeOfMessage({ redirectList: [], statusCode: 404, headers: {} }, properties).outcome, "failed");
});

test("a Result that is not a JSON object (a text or a list the vendor answered) is left out, not refused", () => {
  const withResult = { externalIdFrom: "payload.id", resultFrom: "payload" };
  for (const payload of ["OK", ["a"], null]) {
    const outcome = outcomeOfMessage({ statusCode: 200, payload, headers: {} }, withResult);
    assert.deepEqual(outcome, { outcome: "succeeded" }, JSON.stringify(payload));
  }
  const recorded = outcomeOfMessage({ statusCode: 200, payload: { id: 4, ok: true }, headers: {} }, withResult);
  assert.deepEqual(recorded, { outcome: "succeeded", externalId: "4", result: { id: 4, ok: true } });
});
