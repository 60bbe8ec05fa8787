// The one place a vendor call's end becomes an outcome: unknown whenever it may have reached the
// vendor, failed only when nothing was sent (or the vendor refused it: 4xx).
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Ambiguous, Permanent, VendorCallError, outcomeOfError, outcomeOfVendorCall } from "opsconsole-client";

function codeError(code, message = `connect ${code} 127.0.0.1:9`) {
  return Object.assign(new Error(message), { code });
}

describe("outcomeOfVendorCall", () => {
  it("a 2xx is a success, with the record id and result", () => {
    assert.deepEqual(outcomeOfVendorCall({ statusCode: 201, externalId: 7, result: { a: 1 } }), { outcome: "succeeded", externalId: "7", result: { a: 1 } });
    assert.deepEqual(outcomeOfVendorCall({ statusCode: "200" }), { outcome: "succeeded" });
  });

  it("a 429 is transient with the vendor's Retry-After, whatever the header's case", () => {
    assert.deepEqual(outcomeOfVendorCall({ statusCode: 429, headers: { "Retry-After": "7" } }), {
      outcome: "failed",
      category: "transient",
      error: "the vendor answered HTTP 429",
      retryAfter: 7,
    });
    assert.equal(outcomeOfVendorCall({ statusCode: 429, headers: { "retry-after": "3" } }).retryAfter, 3);
    assert.equal(outcomeOfVendorCall({ statusCode: 429, headers: new Headers({ "Retry-After": "2" }) }).retryAfter, 2);
    assert.equal(outcomeOfVendorCall({ statusCode: 429 }).retryAfter, undefined);
  });

  for (const status of [408, 500, 502, 503, 504, 599, 302]) {
    it(`a ${status} is unknown: the request reached the vendor`, () => {
      assert.equal(outcomeOfVendorCall({ statusCode: status }).outcome, "unknown");
    });
  }

  for (const status of [400, 401, 403, 404, 409, 422]) {
    it(`a ${status} is a permanent failure (a person decides)`, () => {
      assert.deepEqual(outcomeOfVendorCall({ statusCode: status }), { outcome: "failed", category: "permanent", error: `the vendor answered HTTP ${status}` });
    });
  }

  for (const code of ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]) {
    it(`${code} (nothing was sent) is transient, as a code string or an error`, () => {
      assert.equal(outcomeOfVendorCall({ statusCode: code, error: `RequestError: connect ${code}` }).category, "transient");
      assert.equal(outcomeOfVendorCall({ error: codeError(code) }).category, "transient");
      assert.equal(outcomeOfVendorCall({ error: new TypeError("fetch failed", { cause: codeError(code) }) }).category, "transient");
    });
  }

  for (const code of ["ETIMEDOUT", "ESOCKETTIMEDOUT", "ECONNRESET", "EPIPE", "UND_ERR_SOCKET", "SOMETHING_NEW"]) {
    it(`${code} may have reached the vendor: unknown, never failed`, () => {
      assert.equal(outcomeOfVendorCall({ statusCode: code }).outcome, "unknown");
      assert.equal(outcomeOfVendorCall({ error: codeError(code) }).outcome, "unknown");
    });
  }

  it("an abort, a timeout, an unknown error or nothing at all is unknown", () => {
    assert.equal(outcomeOfVendorCall({ error: new DOMException("aborted", "AbortError") }).outcome, "unknown");
    assert.equal(outcomeOfVendorCall({ error: new DOMException("timed out", "TimeoutError") }).outcome, "unknown");
    assert.equal(outcomeOfVendorCall({ error: new Error("boom") }).outcome, "unknown");
    assert.equal(outcomeOfVendorCall({}).outcome, "unknown");
  });

  it("the error text is at most 500 characters", () => {
    const outcome = outcomeOfVendorCall({ statusCode: "ETIMEDOUT", error: "x".repeat(3000) });
    assert.equal(outcome.error.length, 500);
    assert.match(outcome.error, /^ETIMEDOUT: x+…$/);
  });
});

describe("outcomeOfError (what fn threw)", () => {
  it("Permanent is a permanent failure, Ambiguous unknown", () => {
    assert.deepEqual(outcomeOfError(new Permanent("card declined")), { outcome: "failed", category: "permanent", error: "Permanent: card declined" });
    assert.equal(outcomeOfError(new Ambiguous("?")).outcome, "unknown");
  });

  it("a VendorCallError says whether it was sent, or the vendor's status", () => {
    assert.equal(outcomeOfError(new VendorCallError("no socket", { sent: false })).category, "transient");
    assert.equal(outcomeOfError(new VendorCallError("bad data", { sent: false, permanent: true })).category, "permanent");
    assert.equal(outcomeOfError(new VendorCallError("reset", { sent: true })).outcome, "unknown");
    assert.equal(outcomeOfError(new VendorCallError("HTTP 500", { sent: true, statusCode: 500 })).outcome, "unknown");
    assert.equal(outcomeOfError(new VendorCallError("HTTP 400", { sent: true, statusCode: 400 })).category, "permanent");
    const limited = outcomeOfError(new VendorCallError("HTTP 429", { sent: true, statusCode: 429, headers: { "retry-after": "9" } }));
    assert.deepEqual([limited.category, limited.retryAfter], ["transient", 9]);
    assert.equal(outcomeOfError(new VendorCallError("odd", { sent: true, statusCode: 201 })).outcome, "unknown");
  });

  it("a network error is read by its code; anything else is unknown", () => {
    assert.equal(outcomeOfError(new TypeError("fetch failed", { cause: codeError("ECONNREFUSED") })).category, "transient");
    assert.equal(outcomeOfError(new TypeError("fetch failed", { cause: codeError("UND_ERR_SOCKET", "other side closed") })).outcome, "unknown");
    assert.equal(outcomeOfError(new Error("a bug in the flow")).outcome, "unknown");
    assert.equal(outcomeOfError("a string").outcome, "unknown");
  });
});
