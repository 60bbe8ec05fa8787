/**
 * What the client throws, and what a caller's `fn` throws to say how its call failed.
 *
 * The client never turns an error into "go ahead": the service out of reach is `ServiceUnavailable`,
 * a refusal of the request is `Refused`, a lease taken from a claim is `ClaimLost`. The deferring
 * answers (done, in progress, retry later, held, a person must decide) are not errors: they are a
 * `Claim` whose `shouldAct` is false.
 */

export type JsonObject = Record<string, unknown>;

/** Base of everything this client throws. */
export class ClaimError extends Error {
  override name = "ClaimError";
}

/** opsconsole did not answer (network error, timeout, 5xx) after every retry: nothing is known
 * about the request's effect, so do not act on it. */
export class ServiceUnavailable extends ClaimError {
  override name = "ServiceUnavailable";
  readonly attempts: number;
  /** The last answer's HTTP status; undefined when none came. */
  readonly httpStatus?: number;
  /** The last answer's Retry-After, in seconds. */
  readonly retryAfter?: number;

  constructor(message: string, options: { attempts: number; httpStatus?: number; retryAfter?: number; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.attempts = options.attempts;
    this.httpStatus = options.httpStatus;
    this.retryAfter = options.retryAfter;
  }
}

/** opsconsole refused the request itself (401, 404, 409 blocked, 422, ...): sending it again the
 * same way gets the same answer. */
export class Refused extends ClaimError {
  override name = "Refused";
  readonly httpStatus: number;
  /** The answer's `status`: "blocked", "unauthorized", "not_found", "outcome_conflict", ... */
  readonly status: string;
  /** For "blocked": "invalid_input", "payload_conflict", ... */
  readonly reason: string;
  readonly errors: unknown[];
  readonly body: JsonObject;

  constructor(httpStatus: number, body: JsonObject) {
    const status = String(body.status ?? "");
    const reason = String(body.reason ?? "");
    const errors = Array.isArray(body.errors) ? body.errors : [];
    const detail = String(body.message ?? body.detail ?? "") || (errors.length ? JSON.stringify(errors) : "");
    const what = reason ? `${status} (${reason})` : status || "refused";
    super(`${httpStatus} ${what}${detail ? `: ${detail}` : ""}`);
    this.httpStatus = httpStatus;
    this.status = status;
    this.reason = reason;
    this.errors = errors;
    this.body = body;
  }
}

/** This claim's token is no longer the operation's (its lease expired, or the operation was decided
 * meanwhile): the server refused it as stale and recorded nothing. Once a lease expires unreported
 * the operation is `unknown` until a lookup or a person decides. */
export class ClaimLost extends ClaimError {
  override name = "ClaimLost";
  readonly key: string;

  constructor(key: string, message = "") {
    super(`the claim of ${key} was lost (its token is stale): nothing this claim reports is recorded${message ? `; ${message}` : ""}`);
    this.key = key;
  }
}

/** Throw it from `fn` to report a permanent failure: nothing took effect and retrying would not help
 * (a person decides). */
export class Permanent extends Error {
  override name = "Permanent";
}

/** Throw it from `fn` when the effect may have happened: the client reports `unknown`. */
export class Ambiguous extends Error {
  override name = "Ambiguous";
}

/**
 * Throw it from `fn` to say what became of the vendor call: `sent: false` when the request never
 * left (the failure is reported transient, or permanent with `permanent: true`), `sent: true` when
 * it may have reached the vendor (reported unknown), or the vendor's `statusCode` (mapped by
 * `outcomeOfVendorCall`: 2xx is not an error, 429 transient, 408 and 5xx unknown, other 4xx
 * permanent).
 */
export class VendorCallError extends Error {
  override name = "VendorCallError";
  readonly sent: boolean;
  readonly statusCode?: number;
  readonly headers?: unknown;
  readonly permanent: boolean;

  constructor(
    message: string,
    options: { sent: boolean; statusCode?: number; headers?: unknown; permanent?: boolean; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.sent = options.sent;
    this.statusCode = options.statusCode;
    this.headers = options.headers;
    this.permanent = options.permanent ?? false;
  }
}
