"use strict";
// Standard Webhooks (standardwebhooks.com) verification of opsconsole's notifications: `v1,` and the
// base64 HMAC-SHA256 of `id.timestamp.body`, keyed with the base64 part of a `whsec_` secret; several
// space-separated signatures allowed; a timestamp more than five minutes away is refused.
const crypto = require("node:crypto");

const TOLERANCE_SECONDS = 5 * 60;

class SignatureError extends Error {}

function secretBytes(secret) {
  if (typeof secret !== "string" || !secret.startsWith("whsec_")) {
    throw new SignatureError("the signing secret must be a whsec_ secret (set it in the connection's credentials)");
  }
  const bytes = Buffer.from(secret.slice("whsec_".length), "base64");
  if (bytes.length === 0) throw new SignatureError("the signing secret is empty after whsec_");
  return bytes;
}

function header(headers, name) {
  const value = headers[name] ?? headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

/** Verify `rawBody` (a Buffer or string) with its headers; returns the parsed body or throws SignatureError. */
function verify(secret, rawBody, headers, { now = Date.now() } = {}) {
  const key = secretBytes(secret);
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) throw new SignatureError("missing webhook-id, webhook-timestamp or webhook-signature");
  const seconds = Number(timestamp);
  if (!Number.isInteger(seconds) || Math.abs(now / 1000 - seconds) > TOLERANCE_SECONDS) {
    throw new SignatureError("webhook-timestamp is not within five minutes of now");
  }
  const body = Buffer.isBuffer(rawBody) ? rawBody.toString("utf8") : String(rawBody);
  const expected = crypto.createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest();
  const matches = String(signatures)
    .split(" ")
    .filter((part) => part.startsWith("v1,"))
    .some((part) => {
      const given = Buffer.from(part.slice(3), "base64");
      return given.length === expected.length && crypto.timingSafeEqual(given, expected);
    });
  if (!matches) throw new SignatureError("no webhook-signature matches");
  try {
    return { id, body: JSON.parse(body) };
  } catch {
    throw new SignatureError("the body is not JSON");
  }
}

/** The message a verified notification gives the due node's output: an `operation.due` with its
 * key, of `action` when the node names one (a subscription sends the due work of every caller
 * action of the workspace; a flow claims only its own); else undefined. */
function dueMessage(verified, action) {
  const body = verified.body;
  const data = body && typeof body === "object" && body.data && typeof body.data === "object" ? body.data : {};
  if (body?.type !== "operation.due" || typeof data.key !== "string" || !data.key) return undefined;
  if (action && data.action !== action) return undefined;
  return { key: data.key, action: data.action, payload: body, webhookId: verified.id };
}

/** Sign as opsconsole does (for tests and for checking a receiver by hand). */
function sign(secret, id, timestamp, body) {
  const digest = crypto.createHmac("sha256", secretBytes(secret)).update(`${id}.${timestamp}.${body}`).digest("base64");
  return `v1,${digest}`;
}

module.exports = { verify, sign, dueMessage, SignatureError, TOLERANCE_SECONDS };
