import { createHmac, timingSafeEqual } from "node:crypto";

/** How far a notification's timestamp may be from now (Standard Webhooks' recommendation): older is a replay. */
export const TOLERANCE_SECONDS = 5 * 60;

export type Verdict = { valid: true } | { valid: false; reason: string };

/**
 * A Standard Webhooks signature check (what opsconsole's notifications carry: webhook-id,
 * webhook-timestamp, webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>", keyed by the
 * base64 secret after "whsec_"). The reason never quotes the secret or a signature.
 */
export function verifySignature(
  secret: string,
  headers: Record<string, string | string[] | undefined>,
  rawBody: Buffer | string,
  nowSeconds: number = Date.now() / 1000,
): Verdict {
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) {
    return { valid: false, reason: "missing webhook-id, webhook-timestamp or webhook-signature" };
  }
  const sentAt = Number(timestamp);
  if (!Number.isInteger(sentAt)) return { valid: false, reason: "webhook-timestamp is not a number of seconds" };
  if (Math.abs(nowSeconds - sentAt) > TOLERANCE_SECONDS) {
    return { valid: false, reason: "webhook-timestamp is more than 5 minutes from now" };
  }
  const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret, "base64");
  const body = typeof rawBody === "string" ? rawBody : rawBody.toString("utf8");
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest();
  for (const candidate of signatures.split(" ")) {
    const [version, encoded] = candidate.split(",", 2);
    if (version !== "v1" || !encoded) continue;
    const given = Buffer.from(encoded, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { valid: true };
  }
  return { valid: false, reason: "no v1 signature matches the signing secret" };
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = headers[name] ?? headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}
