/**
 * One claim of an operation: what opsconsole answered and, after a 201, the handle to report with.
 *
 * Only a 201 says act (`shouldAct`). While the holder acts, `startHeartbeat()` extends the lease every
 * third of it; a report (`succeeded`, `failed`, `unknown`) is retried until it is recorded, refused,
 * or the claim is lost, and stops the heartbeat.
 */

import { ClaimError, ClaimLost, Refused, ServiceUnavailable, type JsonObject } from "./errors.js";
import { limit, type Outcome } from "./outcome.js";
import { dropUndefined, retryAfterSeconds, sleep, type Answer } from "./transport.js";

/** What a claim needs of the client: its requests. */
export interface Requester {
  request(method: string, path: string, options?: { body?: unknown; retries?: number }): Promise<Answer>;
  readonly heartbeatEvery?: number;
  /** Milliseconds before the next try of a report the service did not answer. */
  reportDelayMs(attempt: number, retryAfterSeconds?: number): number;
}

/** The operation's state after a report, as the claim's status. */
const STATUS_AFTER_REPORT: Record<string, string> = {
  succeeded: "done",
  retrying: "retry_later",
  needs_review: "needs_review",
  unknown: "unknown",
};

const DEFAULT_LEASE_SECONDS = 60;

export interface Report {
  status: "recorded";
  /** The operation's state now: "succeeded", "retrying", "needs_review", "unknown". */
  state: string;
  nextAttemptAt?: string;
  body: JsonObject;
}

/** What `toJSON` gives and `Claim.fromJSON` takes: enough to heartbeat and report from elsewhere. */
export interface ClaimJSON {
  key: string;
  status: string;
  httpStatus: number;
  token?: string;
  attempt?: number;
  idempotencyKey?: string;
  leaseExpiresAt?: string;
  leaseSeconds: number;
  /** The lease the claim asked for (sent with each heartbeat); absent: the action's. */
  requestedLeaseSeconds?: number;
  retryAfter?: number;
  externalId?: string;
  result?: unknown;
  message?: string;
}

/** The path of a claim's route: a key holds ':' and may hold '/', so it travels as one segment. */
export function claimPath(key: string, what: "heartbeat" | "outcome"): string {
  return `/api/v1/claims/${keySegment(key)}/${what}`;
}

/** A key as one path segment, percent-encoded. "." and ".." are refused: a URL drops or climbs them
 * whatever their encoding, so the request would go to another route. */
export function keySegment(key: string): string {
  if (typeof key !== "string" || !key || key === "." || key === "..") {
    throw new TypeError(`key is the operation's key, e.g. demo:INV-7:v1:send-invoice, not ${JSON.stringify(key)}`);
  }
  return encodeURIComponent(key);
}

export class Claim {
  /** The answer's HTTP status; 201 is the only one that says act. */
  readonly httpStatus: number;
  /** The whole answer body, for fields this class does not name. */
  readonly answer: JsonObject;
  /** The operation as this client last knew it: the claim's answer, then after a recorded report
   * the operation's new state ("done", "retry_later", "needs_review", "unknown"). */
  status: string;
  readonly shouldAct: boolean;
  readonly key: string;
  readonly token?: string;
  readonly attempt?: number;
  readonly idempotencyKey?: string;
  leaseExpiresAt?: Date;
  /** The operation's data, in a 201 answer to a claim by key. */
  readonly data?: JsonObject;
  result?: unknown;
  externalId?: string;
  /** Seconds to wait before claiming again (a deferring answer's Retry-After). */
  readonly retryAfter?: number;
  readonly message?: string;
  /** The outcome recorded, once a report was. */
  reported?: Outcome["outcome"];
  recorded?: Report;
  /** The length of the lease, in seconds: what was asked for, else read from the answer. */
  get leaseSeconds(): number {
    return this.#carriedLease ?? this.#leaseSeconds;
  }
  /** The last heartbeat's failure to reach the service, if its last try failed. */
  heartbeatError?: unknown;

  #ops: Requester;
  #requestedLease?: number;
  #carriedLease?: number; // the lease's length a carried claim knew (fromJSON)
  #lost = false;
  #acted = false;
  #leaseSeconds: number;
  #heartbeat?: ReturnType<typeof setTimeout>;
  #heartbeating = false;
  #heartbeatRun = 0; // which start() a scheduled beat belongs to: a stopped run never reschedules
  #reportBody?: string;
  #reporting?: Promise<Report>;

  constructor(ops: Requester, answer: Answer, options: { leaseSeconds?: number } = {}) {
    const body = answer.body;
    this.#ops = ops;
    this.#requestedLease = options.leaseSeconds;
    this.httpStatus = answer.httpStatus;
    this.answer = body;
    this.status = String(body.status ?? "");
    this.shouldAct = answer.httpStatus === 201;
    this.key = String(body.key ?? "");
    this.token = optionalString(body.token);
    this.attempt = typeof body.attempt === "number" ? body.attempt : undefined;
    this.idempotencyKey = optionalString(body.idempotency_key);
    this.leaseExpiresAt = optionalDate(body.lease_expires_at);
    this.data = body.data && typeof body.data === "object" ? (body.data as JsonObject) : undefined;
    this.result = body.result ?? undefined;
    this.externalId = optionalString(body.external_id);
    this.message = optionalString(body.message);
    this.retryAfter =
      typeof body.retry_after === "number" ? body.retry_after : retryAfterSeconds(answer.headers.get("retry-after"));
    this.#leaseSeconds = leaseLength(options.leaseSeconds, this.leaseExpiresAt, answer.headers.get("date"));
  }

  /** The server refused this claim's token as stale: nothing it reports is recorded. */
  get lost(): boolean {
    return this.#lost;
  }

  /** Milliseconds between heartbeats: the client's `heartbeatEvery`, else a third of the lease. */
  get heartbeatEveryMs(): number {
    return this.#ops.heartbeatEvery ?? (this.leaseSeconds * 1000) / 3;
  }

  /** Say the vendor was called (the effect may have happened): from now on an error `fn` throws is
   * reported unknown, never failed, whatever its code. Call it after each vendor call when `fn`
   * makes more calls after it (a refused connection to the next one says nothing of the first). */
  acted(): void {
    this.#acted = true;
  }

  /** Whether `acted()` was called. */
  get hasActed(): boolean {
    return this.#acted;
  }

  // The lease

  /** Extend the lease every third of it until a report, `stopHeartbeat()`, or the claim is lost.
   * A failed heartbeat is tried again three times as often, so a short outage does not cost the lease. */
  startHeartbeat(): void {
    if (!this.shouldAct || this.#heartbeating || this.reported || this.#lost) return;
    this.#heartbeating = true;
    this.#heartbeatRun += 1;
    this.#scheduleHeartbeat(this.heartbeatEveryMs, this.#heartbeatRun);
  }

  stopHeartbeat(): void {
    this.#heartbeating = false;
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#heartbeat = undefined;
  }

  /** One heartbeat, without retries. Marks the claim lost on opsconsole's 409 stale_token or 404
   * not_found (not on another 404 or 409: a proxy's page loses nothing). */
  async extend(): Promise<void> {
    const body = dropUndefined({ token: this.token, lease_seconds: this.#requestedLease });
    const answer = await this.#ops.request("POST", claimPath(this.key, "heartbeat"), { body, retries: 0 });
    const status = answer.body.status;
    if (answer.httpStatus === 200 && status === "extended") {
      this.leaseExpiresAt = optionalDate(answer.body.lease_expires_at) ?? this.leaseExpiresAt;
    } else if ((answer.httpStatus === 409 && status === "stale_token") || (answer.httpStatus === 404 && status === "not_found")) {
      this.#lose();
    } else {
      throw new Refused(answer.httpStatus, answer.body);
    }
  }

  #scheduleHeartbeat(delayMs: number, run: number): void {
    // unref: a heartbeat alone does not keep a process alive (the caller's own work does).
    this.#heartbeat = setTimeout(() => void this.#beat(run), delayMs);
    this.#heartbeat.unref?.();
  }

  async #beat(run: number): Promise<void> {
    if (!this.#heartbeating || run !== this.#heartbeatRun) return;
    let next = this.heartbeatEveryMs;
    try {
      await this.extend();
      this.heartbeatError = undefined;
    } catch (error) {
      this.heartbeatError = error;
      next = this.heartbeatEveryMs / 3;
    }
    if (this.#heartbeating && run === this.#heartbeatRun && !this.#lost && !this.reported) {
      this.#scheduleHeartbeat(next, run);
    }
  }

  #lose(): void {
    if (this.reported) return;
    this.#lost = true;
    this.stopHeartbeat();
  }

  // Reports

  /** Record the success: every later claim of this key is answered done with `result` (an object)
   * and `externalId` (the destination's record id). */
  succeeded(options: { externalId?: string | number; result?: JsonObject } = {}): Promise<Report> {
    const outcome: Outcome = { outcome: "succeeded" };
    if (options.externalId !== undefined && options.externalId !== null) outcome.externalId = String(options.externalId);
    if (options.result !== undefined) outcome.result = options.result;
    return this.report(outcome);
  }

  /** Record a failure without effect: transient (tried again later, after `retryAfter` seconds if
   * given) or permanent (a person decides). */
  failed(options: { category: "transient" | "permanent"; error?: string; retryAfter?: number }): Promise<Report> {
    return this.report({ outcome: "failed", ...options });
  }

  /** Record that the effect may or may not have happened: nobody acts again until a lookup or a
   * person decides. */
  unknown(options: { error?: string } = {}): Promise<Report> {
    return this.report({ outcome: "unknown", ...options });
  }

  /** Report an outcome, retried until it is recorded. The same report again answers as the first;
   * a different one throws `ClaimError`. Throws `ClaimLost` on 409 stale_token, `Refused` on any
   * other refusal, `ServiceUnavailable` once the lease is over without an answer (the server makes
   * the operation unknown then, whatever is sent). */
  report(outcome: Outcome): Promise<Report> {
    let body: JsonObject;
    try {
      body = reportBody(outcome);
    } catch (error) {
      return Promise.reject(error);
    }
    const text = JSON.stringify(body);
    if (!this.shouldAct) {
      return Promise.reject(new ClaimError(`nothing to report for ${this.key}: the claim was answered ${this.status}, not claimed`));
    }
    if (this.#reportBody !== undefined) {
      if (this.#reportBody === text && this.#reporting) return this.#reporting;
      return Promise.reject(new ClaimError(`the outcome of ${this.key} was already reported (${this.#reportOutcome()})`));
    }
    if (this.#lost) return Promise.reject(new ClaimLost(this.key, "the heartbeat was refused"));
    this.#reportBody = text;
    this.#reporting = this.#send(body);
    this.#reporting.catch(() => {
      this.#reportBody = undefined; // refused or lost: nothing recorded, so another report may be tried
      this.#reporting = undefined;
    });
    return this.#reporting;
  }

  #reportOutcome(): string {
    return this.#reportBody ? String(JSON.parse(this.#reportBody).outcome) : "";
  }

  async #send(body: JsonObject): Promise<Report> {
    this.startHeartbeat(); // the lease is kept while the report is retried
    try {
      const answer = await this.#sendUntilAnswered({ token: this.token, ...body });
      if (answer.httpStatus === 409 && answer.body.status === "stale_token") {
        this.#lose();
        throw new ClaimLost(this.key, String(answer.body.message ?? ""));
      }
      if (answer.httpStatus !== 200 || answer.body.status !== "recorded") throw new Refused(answer.httpStatus, answer.body);
      const report: Report = { status: "recorded", state: String(answer.body.state ?? ""), body: answer.body };
      if (typeof answer.body.next_attempt_at === "string") report.nextAttemptAt = answer.body.next_attempt_at;
      this.reported = body.outcome as Outcome["outcome"];
      this.recorded = report;
      this.#lost = false; // a heartbeat that crossed the report may have been refused after it
      this.status = STATUS_AFTER_REPORT[report.state] ?? this.status;
      if (body.outcome === "succeeded") {
        this.result = body.result;
        this.externalId = body.external_id as string | undefined;
      }
      return report;
    } finally {
      this.stopHeartbeat();
    }
  }

  /** The report's answer: tried again while the service fails, until the lease is over. */
  async #sendUntilAnswered(body: JsonObject): Promise<Answer> {
    const leaseFromNow = Date.now() + this.leaseSeconds * 1000; // when the answer named no expiry
    for (let round = 1; ; round++) {
      try {
        return await this.#ops.request("POST", claimPath(this.key, "outcome"), { body });
      } catch (error) {
        if (!(error instanceof ServiceUnavailable) || this.#leaseOver(leaseFromNow)) throw error;
        await sleep(this.#ops.reportDelayMs(round, error.retryAfter));
      }
    }
  }

  #leaseOver(otherwiseAt: number): boolean {
    return (this.leaseExpiresAt?.getTime() ?? otherwiseAt) < Date.now();
  }

  // Carrying a claim in a message

  toJSON(): ClaimJSON {
    return dropUndefined({
      key: this.key,
      status: this.status,
      httpStatus: this.httpStatus,
      token: this.token,
      attempt: this.attempt,
      idempotencyKey: this.idempotencyKey,
      leaseExpiresAt: this.leaseExpiresAt?.toISOString(),
      leaseSeconds: this.leaseSeconds,
      requestedLeaseSeconds: this.#requestedLease,
      retryAfter: this.retryAfter,
      externalId: this.externalId,
      result: this.result,
      message: this.message,
    }) as unknown as ClaimJSON;
  }

  /** A claim carried as `toJSON()` gave it (a flow's message), to heartbeat and report with. Its
   * requests go to `ops`'s opsconsole only; each field is checked, as a message may be anyone's. */
  static fromJSON(ops: Requester, json: ClaimJSON | string): Claim {
    const claim = carriedClaim(typeof json === "string" ? JSON.parse(json) : json);
    const body = dropUndefined({
      status: claim.status,
      key: claim.key,
      token: claim.token,
      attempt: claim.attempt,
      idempotency_key: claim.idempotencyKey,
      lease_expires_at: claim.leaseExpiresAt,
      retry_after: claim.retryAfter,
      external_id: claim.externalId,
      result: claim.result,
      message: claim.message,
    });
    const carried = new Claim(ops, { httpStatus: claim.httpStatus, body, headers: new Headers() }, { leaseSeconds: claim.requestedLeaseSeconds });
    carried.#carriedLease = claim.leaseSeconds;
    return carried;
  }

  /** What util.inspect (console.log) shows: everything but the token. */
  [Symbol.for("nodejs.util.inspect.custom")](): object {
    const { token, ...shown } = this.toJSON();
    return { ...shown, ...(token ? { token: "[hidden]" } : {}), lost: this.#lost, reported: this.reported };
  }
}

/** A carried claim's fields, each of the type and within the bounds a real one has. */
function carriedClaim(json: unknown): ClaimJSON {
  const claim = json as ClaimJSON;
  if (!claim || typeof claim !== "object" || typeof claim.key !== "string" || !claim.key || !Number.isInteger(claim.httpStatus)) {
    throw new ClaimError("not a claim: expected the object Claim.toJSON() gives, with its key and httpStatus");
  }
  const wrong = (field: string) => new ClaimError(`not a claim of ${claim.key}: its ${field} is not what Claim.toJSON() gives`);
  if (claim.key === "." || claim.key === "..") throw wrong("key");
  if (claim.token !== undefined && (typeof claim.token !== "string" || !claim.token)) throw wrong("token");
  if (claim.httpStatus === 201 && !claim.token) {
    throw new ClaimError(`the claim of ${claim.key} carries no token: it cannot be reported`);
  }
  if (!isLease(claim.leaseSeconds)) throw wrong(`leaseSeconds (${LEASE_MIN}..${LEASE_MAX})`);
  if (claim.requestedLeaseSeconds !== undefined && !(isLease(claim.requestedLeaseSeconds) && Number.isInteger(claim.requestedLeaseSeconds))) {
    throw wrong(`requestedLeaseSeconds (whole seconds, ${LEASE_MIN}..${LEASE_MAX})`);
  }
  for (const field of ["status", "idempotencyKey", "leaseExpiresAt", "externalId", "message"] as const) {
    if (claim[field] !== undefined && typeof claim[field] !== "string") throw wrong(field);
  }
  for (const field of ["attempt", "retryAfter"] as const) {
    if (claim[field] !== undefined && !(typeof claim[field] === "number" && Number.isFinite(claim[field]))) throw wrong(field);
  }
  return claim;
}

/** The bounds opsconsole puts on a lease, in seconds. */
const LEASE_MIN = 5;
const LEASE_MAX = 3600;

function isLease(value: unknown): value is number {
  return typeof value === "number" && value >= LEASE_MIN && value <= LEASE_MAX;
}

function reportBody(outcome: Outcome): JsonObject {
  switch (outcome.outcome) {
    case "succeeded":
      if (outcome.result !== undefined && (outcome.result === null || typeof outcome.result !== "object" || Array.isArray(outcome.result))) {
        throw new TypeError("the result recorded is an object (a JSON object)");
      }
      return dropUndefined({ outcome: "succeeded", external_id: outcome.externalId, result: outcome.result });
    case "failed":
      if (outcome.category !== "transient" && outcome.category !== "permanent") {
        throw new TypeError(`category is "transient" or "permanent", not ${JSON.stringify(outcome.category)}`);
      }
      if (outcome.retryAfter !== undefined && outcome.category !== "transient") {
        throw new TypeError("retryAfter is for a transient failure only");
      }
      return dropUndefined({
        outcome: "failed",
        category: outcome.category,
        error: outcome.error === undefined ? undefined : limit(outcome.error),
        retry_after: outcome.retryAfter,
      });
    case "unknown":
      return dropUndefined({ outcome: "unknown", error: outcome.error === undefined ? undefined : limit(outcome.error) });
    default:
      throw new TypeError(`an outcome is "succeeded", "failed" or "unknown", not ${JSON.stringify((outcome as { outcome: unknown }).outcome)}`);
  }
}

function optionalString(value: unknown): string | undefined {
  return typeof value === "string" && value ? value : undefined;
}

function optionalDate(value: unknown): Date | undefined {
  if (typeof value !== "string" || !value) return undefined;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** How long the lease lasts, to heartbeat at a third of it: the length asked for; else the expiry
 * against the server's clock (its Date header), else against ours; else the default. */
function leaseLength(requested: number | undefined, expiresAt: Date | undefined, date: string | null): number {
  if (requested) return requested;
  if (!expiresAt) return DEFAULT_LEASE_SECONDS;
  const serverNow = date ? Date.parse(date) : NaN;
  const now = Number.isNaN(serverNow) ? Date.now() : serverNow;
  // Within opsconsole's bounds: the Date header's whole seconds may make the longest lease 3600.9 s.
  return Math.min(LEASE_MAX, Math.max(LEASE_MIN, (expiresAt.getTime() - now) / 1000));
}
