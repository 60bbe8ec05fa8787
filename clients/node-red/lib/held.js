"use strict";
// The claims this Node-RED process holds between a claim node's "act now" and a report node: the
// client's HeldClaims (their heartbeats, each one's cap, let go by owner), one registry per process
// that every claim and report node of the package shares. A report finds its claim by the message's
// `msg.claim` (what the claim node put there: `claim.toJSON()`).

const { HeldClaims } = require("opsconsole-client");

const held = new HeldClaims();

/** The live claim for a message's `msg.claim`, no longer held here (its report stops its heartbeat). */
function take(json) {
  return held.take(json && typeof json === "object" ? json.token : undefined);
}

module.exports = {
  hold: (claim, options) => held.hold(claim, options),
  take,
  releaseAll: (owner) => held.releaseAll(owner),
  count: () => held.size,
};
