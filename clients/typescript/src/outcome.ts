/**
 * The one place a vendor call's end becomes an outcome to report (the Node-RED report node, the n8n
 * node and `claim(action, data, fn)` all use it).
 *
 * Whenever the call may have reached the vendor, the outcome is `unknown`, never `failed`: a failed
 * transient try is tried again, and a vendor without idempotency keys would then record it twice.
 */

import { Ambiguous, Permanent, VendorCallError, type JsonObject } from "./errors.js";
import { retryAfterSeconds } from "./transport.js";

export type Outcome =
  | { outcome: "succeeded"; externalId?: string; result?: JsonObject }
  | { outcome: "failed"; category: "transient" | "permanent"; error?: string; retryAfter?: number }
  | { outcome: "unknown"; error?: string };

export interface VendorCall {
  /** The vendor's HTTP status, or an error code string (Node-RED's `http request` node puts
   * "ETIMEDOUT", "ECONNREFUSED", ... there on an error). */
  statusCode?: number | string;
  /** The vendor's answer headers (a plain object, any case, or a `Headers`). */
  headers?: unknown;
  /** The error the call ended with, if it did not answer. */
  error?: unknown;
  externalId?: string | number;
  result?: JsonObject;
}

/** The error text opsconsole keeps is at most this long. */
export const ERROR_LIMIT = 500;

/** Error codes with which a request never left: nothing reached the vendor. */
export const NOT_SENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  // undici (Node's fetch): the connection was never made.
  "UND_ERR_CONNECT_TIMEOUT",
]);

export function outcomeOfVendorCall(call: VendorCall): Outcome {
  const status = statusNumber(call.statusCode);
  if (status !== undefined) return outcomeOfStatus(status, call);
  const code =
    typeof call.statusCode === "string" && call.statusCode.trim() ? call.statusCode.trim() : errorCode(call.error);
  const text = limit([code, errorText(call.error)].filter(Boolean).join(": ") || "the vendor call failed");
  if (code && NOT_SENT_CODES.has(code)) return { outcome: "failed", category: "transient", error: text };
  return { outcome: "unknown", error: text };
}

/** The outcome of an error thrown by a claim's `fn`: what the error says of the vendor call. */
export function outcomeOfError(error: unknown): Outcome {
  if (error instanceof Permanent) return { outcome: "failed", category: "permanent", error: describeError(error) };
  if (error instanceof Ambiguous) return { outcome: "unknown", error: describeError(error) };
  if (error instanceof VendorCallError) {
    if (error.statusCode !== undefined) {
      const outcome = outcomeOfVendorCall({ statusCode: error.statusCode, headers: error.headers });
      // A 2xx thrown as an error is the caller saying it went wrong after the vendor acted.
      if (outcome.outcome === "succeeded") return { outcome: "unknown", error: describeError(error) };
      return { ...outcome, error: describeError(error) } as Outcome;
    }
    if (error.sent) return { outcome: "unknown", error: describeError(error) };
    return { outcome: "failed", category: error.permanent ? "permanent" : "transient", error: describeError(error) };
  }
  // Anything else (a network code, a timeout, an error we cannot read) may have reached the vendor,
  // unless its code says the request never left.
  const code = errorCode(error);
  if (code && NOT_SENT_CODES.has(code)) return { outcome: "failed", category: "transient", error: describeError(error) };
  return { outcome: "unknown", error: describeError(error) };
}

function outcomeOfStatus(status: number, call: VendorCall): Outcome {
  if (status >= 200 && status < 300) {
    const outcome: Outcome = { outcome: "succeeded" };
    if (call.externalId !== undefined && call.externalId !== null) outcome.externalId = String(call.externalId);
    if (call.result !== undefined) outcome.result = call.result;
    return outcome;
  }
  if (status === 429) {
    const retryAfter = retryAfterSeconds(header(call.headers, "retry-after"));
    const outcome: Outcome = { outcome: "failed", category: "transient", error: `the vendor answered HTTP 429` };
    if (retryAfter !== undefined) outcome.retryAfter = retryAfter;
    return outcome;
  }
  if (status >= 400 && status < 500 && status !== 408) {
    return { outcome: "failed", category: "permanent", error: `the vendor answered HTTP ${status}` };
  }
  // 408, 5xx (and a 1xx or 3xx the caller did not follow): the request reached the vendor.
  return { outcome: "unknown", error: `the vendor answered HTTP ${status}` };
}

function statusNumber(value: unknown): number | undefined {
  if (typeof value === "number" && Number.isInteger(value)) return value;
  if (typeof value === "string" && /^\s*\d{3}\s*$/.test(value)) return Number(value);
  return undefined;
}

/** The error's code, looked for on it and along its causes (fetch wraps undici's in a TypeError). */
export function errorCode(error: unknown): string | undefined {
  for (let seen = 0, current = error; current && typeof current === "object" && seen < 5; seen++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && code) return code;
    const name = (current as { name?: unknown }).name;
    if (name === "AbortError" || name === "TimeoutError") return name;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

function header(headers: unknown, name: string): string | undefined {
  if (!headers || typeof headers !== "object") return undefined;
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers as Record<string, unknown>)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? String(value[0]) : String(value);
  }
  return undefined;
}

function errorText(error: unknown): string {
  if (error === undefined || error === null) return "";
  if (error instanceof Error) return error.message;
  return typeof error === "string" ? error : "";
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = errorCode(error);
    return limit(`${error.name}${code && code !== error.name ? ` ${code}` : ""}: ${error.message}`);
  }
  return limit(String(error));
}

/** An error text as it is sent to opsconsole, which keeps it and shows it to people: each URL cut to
 * its origin (a vendor's URL may carry a key in its path, query or user part, and runtimes append it
 * to their errors: Node-RED's `http request` node, n8n's redirect errors), at most ERROR_LIMIT
 * characters. Every report's error passes here. */
export function limit(text: string): string {
  const cut = urlsCutToOrigin(text);
  return cut.length <= ERROR_LIMIT ? cut : cut.slice(0, ERROR_LIMIT - 1) + "…";
}

function urlsCutToOrigin(text: string): string {
  return text.replace(/\bhttps?:\/\/\S+/gi, (url) => {
    try {
      return new URL(url).origin;
    } catch {
      return "<the vendor's URL>";
    }
  });
}
