"use strict";
// Which output of a node each answer leaves by: pure functions, so the nodes stay short and these
// rules are tested on their own (test/routes.test.js).

// The claim node's outputs.
const ACT = 0;
const DONE = 1;
const WAIT = 2;
const PERSON = 3;

// Answers that say "not now, claim again later": someone holds it, a retry is not due yet, the
// previous version has not finished, a pause holds it, or opsconsole itself asked for patience.
const LATER = new Set(["in_progress", "retry_later", "waiting", "held", "unavailable", "busy"]);

// When nothing says how long to wait, claim again after this long.
const DEFAULT_WAIT_SECONDS = 30;

/** The claim node's output for an answer: only a 201 acts; an unknown status is a person's. */
function claimOutput(claim) {
  if (claim.shouldAct) return ACT;
  if (claim.status === "done") return DONE;
  if (LATER.has(claim.status)) return WAIT;
  return PERSON;
}

/** Milliseconds to wait before claiming again, from `retryAfter` seconds or a time to claim at. */
function delayMs({ retryAfter, at, now = Date.now() } = {}) {
  if (at instanceof Date && !Number.isNaN(at.getTime())) {
    // A little after the time, so the claim finds it due rather than not yet.
    return Math.max(0, at.getTime() - now) + 500;
  }
  const seconds = Number(retryAfter);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.round(seconds * 1000);
  return DEFAULT_WAIT_SECONDS * 1000;
}

// How long a claim node holds (heartbeats) a claim its report has not taken, by default and at most.
const DEFAULT_HOLD_SECONDS = 600;
const MAX_HOLD_SECONDS = 24 * 60 * 60;

/** The claim node's *Hold at most*, checked: a negative cap or one past what setTimeout can wait
 * (24.8 days) would give up at once. */
function holdSeconds(value) {
  if (value === undefined || value === null || String(value).trim() === "") return DEFAULT_HOLD_SECONDS;
  const seconds = Number(value);
  if (!Number.isFinite(seconds) || seconds < 1 || seconds > MAX_HOLD_SECONDS) {
    throw new Error(`Hold at most must be a number of seconds from 1 to ${MAX_HOLD_SECONDS}, not ${JSON.stringify(String(value))}`);
  }
  return seconds;
}

// The report node's outputs.
const RECORDED = 0;
const RETRY = 1;
const DECIDE = 2;

/** The report node's output for the state the report left the operation in. */
function reportOutput(state) {
  if (state === "succeeded") return RECORDED;
  if (state === "retrying") return RETRY;
  return DECIDE;
}

/** A message's property by a dotted path ("payload.id"), or undefined. */
function property(msg, path) {
  if (!path) return undefined;
  let value = msg;
  for (const part of String(path).split(".")) {
    if (value === null || value === undefined || typeof value !== "object") return undefined;
    value = value[part];
  }
  return value;
}

/** Send `msg` on output `index` of `count` outputs. */
function on(index, count, msg) {
  const outputs = new Array(count).fill(null);
  outputs[index] = msg;
  return outputs;
}

module.exports = {
  ACT, DONE, WAIT, PERSON, RECORDED, RETRY, DECIDE, LATER, DEFAULT_WAIT_SECONDS,
  claimOutput, delayMs, holdSeconds, reportOutput, property, on,
};
