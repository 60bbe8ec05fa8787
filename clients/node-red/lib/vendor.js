"use strict";
// What the message Node-RED's `http request` node sends on says of the vendor call: the outcome the
// report node reports, from the client's outcomeOfVendorCall (test/vendor.test.js).
const { outcomeOfVendorCall } = require("opsconsole-client");
const { property } = require("./routes");

/** The outcome of the call whose answer (msg.statusCode, msg.headers, msg.payload) or error (an
 * error code in msg.statusCode, its text in msg.payload) `msg` carries. */
function outcomeOfMessage(msg, { externalIdFrom, resultFrom }) {
  const statusCode = msg.statusCode;
  const numeric = Number.isInteger(Number(statusCode)) && String(statusCode ?? "").trim() !== "";
  const outcome = outcomeOfVendorCall({
    statusCode,
    headers: numeric ? msg.headers : undefined,
    // Its text ends with the vendor's URL: the client cuts every URL it sends to its origin.
    error: numeric ? undefined : typeof msg.payload === "string" ? msg.payload : "no answer",
    externalId: idOf(property(msg, externalIdFrom)),
    result: resultFrom ? jsonObject(property(msg, resultFrom)) : undefined,
  });
  if (outcome.outcome === "failed" && Array.isArray(msg.redirectList) && msg.redirectList.length > 0) {
    // The status answers the last request of the redirects followed (a 303's GET, say), not our
    // call, which reached the vendor and may have acted: a retry could act twice.
    return { outcome: "unknown", error: `${outcome.error}, after following a redirect: not the call's own answer` };
  }
  return outcome;
}

/** The value if it is a JSON object, the only result opsconsole records; else nothing (a vendor's
 * 2xx with a text or a list is still a success). */
function jsonObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? value : undefined;
}

function idOf(value) {
  return value === undefined || value === null ? undefined : String(value);
}

module.exports = { outcomeOfMessage };
