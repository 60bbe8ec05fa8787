"use strict";
// The claims this Node-RED process holds between a claim node's "act now" and a report node: their
// heartbeats run here, and each has a cap, so a flow that never reaches its report lets the lease
// expire (the operation becomes unknown, for a lookup or a person) instead of holding it forever.
// One registry per process: every claim and report node of the package shares this module.

const held = new Map();

function id(json) {
  return json && typeof json === "object" ? `${json.key}\u0000${json.token}` : "";
}

/**
 * Start the claim's heartbeats and keep it until `take` or until `maxHoldSeconds` have passed;
 * then its heartbeats stop and `onGiveUp(claim)` is told. `owner` is the claim node, whose close
 * (a redeploy, a stop) lets go of what it holds.
 */
function hold(claim, { maxHoldSeconds, owner, onGiveUp }) {
  const key = id(claim.toJSON());
  claim.startHeartbeat();
  const timer = setTimeout(() => {
    if (held.get(key)?.claim !== claim) return;
    held.delete(key);
    claim.stopHeartbeat();
    onGiveUp?.(claim);
  }, maxHoldSeconds * 1000);
  timer.unref?.();
  held.set(key, { claim, timer, owner });
}

/** The live claim for a message's `msg.claim`, no longer held here (its report stops its heartbeat). */
function take(json) {
  const key = id(json);
  const entry = held.get(key);
  if (!entry) return undefined;
  held.delete(key);
  clearTimeout(entry.timer);
  return entry.claim;
}

/** Stop the heartbeats of every claim `owner` holds: their leases expire, as the protocol says. */
function releaseAll(owner) {
  for (const [key, entry] of held) {
    if (entry.owner !== owner) continue;
    held.delete(key);
    clearTimeout(entry.timer);
    entry.claim.stopHeartbeat();
  }
}

function count() {
  return held.size;
}

module.exports = { hold, take, releaseAll, count };
