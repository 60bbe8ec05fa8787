/**
 * The client of opsconsole's API for flows: events, claims (and the claims protocol in one call),
 * due work, and the management routes (docs/api-for-flows.md).
 */

import { Claim, keySegment, type Report } from "./claim.js";
import { ClaimError, Refused, type JsonObject } from "./errors.js";
import type { paths } from "./openapi.js";
import { describeError, outcomeOfError, type Outcome } from "./outcome.js";
import { dropUndefined, Transport, type Answer, type RequestOptions } from "./transport.js";

export interface OpsconsoleOptions {
  /** Where opsconsole serves, e.g. "http://127.0.0.1:8000" (the API is under /api/v1). */
  baseUrl: string;
  /** A workspace API token (`manage.py token issue`). */
  token: string;
  /** Each request's timeout, in milliseconds (default 10 000). */
  timeoutMs?: number;
  /** Retries of a request after a network error, a timeout or a 5xx (default 4). */
  maxRetries?: number;
  /** The first retry's backoff, doubling with jitter (default 500 ms). */
  backoffMs?: number;
  /** The longest wait between tries, Retry-After included (default 30 000 ms). */
  maxBackoffMs?: number;
  /** Milliseconds between heartbeats (default: a third of the lease). */
  heartbeatEvery?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export interface ClaimOptions {
  leaseSeconds?: number;
  deliveryId?: string;
  correlationId?: string;
  occurredAt?: string | Date;
}

/** What `fn` returns: what to record with the success. */
export interface Performance {
  externalId?: string | number;
  result?: JsonObject;
}

export type Perform = (claim: Claim) => Promise<Performance | void> | Performance | void;

/** The end of `claim(action, data, fn)`: whether `fn` ran (only after a 201), and the operation's
 * status, result and record id as the claim or its report left them. */
export interface Performed {
  claim: Claim;
  performed: boolean;
  status: string;
  result?: unknown;
  externalId?: string;
  /** Seconds to wait before claiming again (in progress, retry later, held, ...). */
  retryAfter?: number;
  report?: Report;
}

export interface SubmitAnswer {
  httpStatus: number;
  status: string;
  body: JsonObject;
}

type Body<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: { content: { "application/json": infer B } };
}
  ? B
  : never;
type Query<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;
type Ok<P extends keyof paths, M extends keyof paths[P], S extends number = 200> = paths[P][M] extends {
  responses: { [status in S]: { content: { "application/json": infer A } } };
}
  ? A
  : JsonObject;

/** One claim of a batch: an event to reserve and claim, or the key of a recorded operation (due work). */
export type ClaimBatchItem = ({ action: string; data: JsonObject } & ClaimOptions) | { key: string; leaseSeconds?: number };

export type EventEnvelope = {
  action: string;
  data: JsonObject;
  delivery_id?: string;
  correlation_id?: string;
  occurred_at?: string;
};

/** The answers that are a claim's (act, or do not act and here is why); every other is a refusal. */
const DEFERRING_HTTP = new Set([409, 423]);

export class Opsconsole {
  readonly baseUrl: string;
  readonly heartbeatEvery?: number;
  readonly #transport: Transport;

  constructor(options: OpsconsoleOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("baseUrl is opsconsole's http(s) URL, e.g. http://127.0.0.1:8000");
    }
    if (typeof options.token !== "string" || !options.token) throw new TypeError("token is a workspace API token");
    const fetchFunction = options.fetch ?? globalThis.fetch;
    if (typeof fetchFunction !== "function") throw new TypeError("no fetch: Node 20 or later has it, or pass one");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "").replace(/\/api\/v1$/, "");
    this.heartbeatEvery = positive(options.heartbeatEvery, "heartbeatEvery");
    this.#transport = new Transport({
      baseUrl: this.baseUrl,
      token: options.token,
      timeoutMs: positive(options.timeoutMs, "timeoutMs") ?? 10_000,
      maxRetries: nonNegativeInteger(options.maxRetries, "maxRetries") ?? 4,
      backoffMs: nonNegative(options.backoffMs, "backoffMs") ?? 500,
      maxBackoffMs: nonNegative(options.maxBackoffMs, "maxBackoffMs") ?? 30_000,
      fetch: fetchFunction.bind(globalThis),
    });
  }

  /** One request, retried while the service fails (network error, timeout, 5xx); any other answer
   * is returned as it came. `path` starts with /api/v1. */
  request(method: string, path: string, options?: RequestOptions): Promise<Answer> {
    return this.#transport.request(method, path, options);
  }

  /** The wait before a report is tried again once the transport gave up (the claim's lease decides
   * when to stop). */
  reportDelayMs(round: number, retryAfterSeconds?: number): number {
    return this.#transport.delayMs(round, retryAfterSeconds);
  }

  // Submitting

  /** POST /api/v1/events: 201 accepted, 200 duplicate, or 409 blocked (payload_conflict, stale);
   * other refusals throw `Refused`. */
  async submitEvent(event: EventEnvelope): Promise<SubmitAnswer> {
    const answer = await this.request("POST", "/api/v1/events", { body: event });
    if (answer.httpStatus >= 300 && answer.httpStatus !== 409) throw new Refused(answer.httpStatus, answer.body);
    return { httpStatus: answer.httpStatus, status: String(answer.body.status ?? ""), body: answer.body };
  }

  /** POST /api/v1/events/batch: each event's answer in `body.results`. */
  async submitBatch(events: EventEnvelope[]): Promise<SubmitAnswer> {
    const answer = await this.request("POST", "/api/v1/events/batch", { body: { events } });
    if (answer.httpStatus >= 300) throw new Refused(answer.httpStatus, answer.body);
    return { httpStatus: answer.httpStatus, status: String(answer.body.status ?? ""), body: answer.body };
  }

  // Claims

  /** Claim the operation that `action` and `data` identify. Without `fn`: the `Claim` (act only if
   * `shouldAct`). With `fn`: the protocol in one call (see `perform`). */
  claim(action: string, data: JsonObject, options?: ClaimOptions): Promise<Claim>;
  claim(action: string, data: JsonObject, fn: Perform, options?: ClaimOptions): Promise<Performed>;
  async claim(
    action: string,
    data: JsonObject,
    fnOrOptions?: Perform | ClaimOptions,
    maybeOptions?: ClaimOptions,
  ): Promise<Claim | Performed> {
    const [fn, options = {}] = typeof fnOrOptions === "function" ? [fnOrOptions, maybeOptions] : [undefined, fnOrOptions];
    const claim = await this.#claim(envelopeBody(action, data, options), options.leaseSeconds);
    return fn ? this.perform(claim, fn) : claim;
  }

  /**
   * POST /api/v1/claims/batch: up to 100 claims (events, or keys of due work) in one request and one
   * commit, each decided as it would be alone, in their order (a key twice: its first item claims).
   * In the items' order: each one's `Claim` (act only where `shouldAct`; each has its own token and
   * is reported on its own, e.g. with `perform`), or the `Refused` a claim of it alone would throw.
   * A list longer than the server takes (its `413 batch_too_large` says its `limit`; nothing was
   * looked at) is sent again in batches of that limit, in order. A batch refused whole otherwise (a
   * bad token) throws `Refused`.
   */
  async claimBatch(items: ClaimBatchItem[]): Promise<(Claim | Refused)[]> {
    if (!Array.isArray(items)) throw new TypeError("items is a list of claims: { action, data } or { key }");
    const claims = items.map((item) =>
      "key" in item ? keyBody(item.key, item.leaseSeconds) : envelopeBody(item.action, item.data, item),
    );
    const answer = await this.request("POST", "/api/v1/claims/batch", { body: { claims } });
    const limit = Number(answer.body.limit);
    if (answer.httpStatus === 413 && answer.body.reason === "batch_too_large" && Number.isInteger(limit) && limit >= 1 && limit < items.length) {
      const answers: (Claim | Refused)[] = [];
      for (let start = 0; start < items.length; start += limit) answers.push(...(await this.claimBatch(items.slice(start, start + limit))));
      return answers;
    }
    const results = answer.body.results;
    if (answer.httpStatus !== 200 || !Array.isArray(results)) throw new Refused(answer.httpStatus, answer.body);
    return (results as JsonObject[]).map((result) => {
      const { index, http_status: httpStatus, ...body } = result;
      const alone: Answer = { httpStatus: Number(httpStatus), body, headers: answer.headers };
      const leaseSeconds = items[Number(index)]?.leaseSeconds;
      return isClaim(alone) ? new Claim(this, alone, { leaseSeconds }) : new Refused(alone.httpStatus, body);
    });
  }

  /** Claim a recorded operation by its key (due work: a notification or `due()`); a 201 carries
   * `data`, what to send. With `fn`, the protocol in one call. */
  claimByKey(key: string, options?: { leaseSeconds?: number }): Promise<Claim>;
  claimByKey(key: string, fn: Perform, options?: { leaseSeconds?: number }): Promise<Performed>;
  async claimByKey(
    key: string,
    fnOrOptions?: Perform | { leaseSeconds?: number },
    maybeOptions?: { leaseSeconds?: number },
  ): Promise<Claim | Performed> {
    const [fn, options = {}] = typeof fnOrOptions === "function" ? [fnOrOptions, maybeOptions] : [undefined, fnOrOptions];
    const claim = await this.#claim(keyBody(key, options.leaseSeconds), options.leaseSeconds);
    return fn ? this.perform(claim, fn) : claim;
  }

  async #claim(body: JsonObject, leaseSeconds?: number): Promise<Claim> {
    const answer = await this.request("POST", "/api/v1/claims", { body });
    if (!isClaim(answer)) throw new Refused(answer.httpStatus, answer.body);
    return new Claim(this, answer, { leaseSeconds });
  }

  /**
   * The protocol for one claim: `fn(claim)` runs only after a 201, with the lease extended every
   * third of it while it runs; what it returns is reported `succeeded`; what it throws is reported
   * as `outcomeOfError` reads it (`failed` when nothing was sent, `unknown` whenever the call may
   * have reached the vendor, and after `claim.acted()` whatever it says) and thrown again, the
   * report's own failure attached as `reportError`.
   */
  async perform(claim: Claim, fn: Perform): Promise<Performed> {
    if (!claim.shouldAct) return performed(claim, false);
    claim.startHeartbeat();
    let returned: Performance | void;
    try {
      returned = await fn(claim);
    } catch (error) {
      const outcome = outcomeOfError(error);
      const reported: Outcome = claim.hasActed && outcome.outcome === "failed" ? { outcome: "unknown", error: outcome.error } : outcome;
      await reportTheError(claim, reported, error);
      throw error;
    }
    let report: Report;
    try {
      report = await claim.succeeded({ externalId: returned?.externalId, result: returned?.result });
    } catch (error) {
      // The vendor acted; a success refused (a result the server will not take) is at least unknown.
      if (error instanceof Refused || error instanceof TypeError) {
        await reportTheError(claim, { outcome: "unknown", error: `the success could not be recorded: ${describeError(error)}` }, error);
      }
      throw error;
    } finally {
      claim.stopHeartbeat();
    }
    return { ...performed(claim, true), report };
  }

  /** GET /api/v1/claims/due: the due operations of callers' actions, oldest first. (The app's
   * document types `limit` as a string, the view reads a number from it: either is taken here.) */
  async due(
    query: Omit<Query<"/api/v1/claims/due", "get">, "limit"> & { limit?: number | string } = {},
  ): Promise<Ok<"/api/v1/claims/due", "get">> {
    return this.#ok("GET", "/api/v1/claims/due", { query: query as RequestOptions["query"] });
  }

  // Management (docs/api-for-flows.md)

  operations(filters: Query<"/api/v1/operations", "get"> = {}): Promise<Ok<"/api/v1/operations", "get">> {
    return this.#ok("GET", "/api/v1/operations", { query: filters as RequestOptions["query"] });
  }

  operation(key: string): Promise<Ok<"/api/v1/operations/{key}", "get">> {
    return this.#ok("GET", operationPath(key));
  }

  approve(key: string, body: Body<"/api/v1/operations/{key}/approve", "post">) {
    return this.#ok<Ok<"/api/v1/operations/{key}/approve", "post">>("POST", operationPath(key, "approve"), { body });
  }

  reject(key: string, body: Body<"/api/v1/operations/{key}/reject", "post">) {
    return this.#ok<Ok<"/api/v1/operations/{key}/reject", "post">>("POST", operationPath(key, "reject"), { body });
  }

  replay(key: string, body: Body<"/api/v1/operations/{key}/replay", "post">) {
    return this.#ok<Ok<"/api/v1/operations/{key}/replay", "post">>("POST", operationPath(key, "replay"), { body });
  }

  /** You found the record at the destination: the operation succeeded with its id. */
  resolve(key: string, body: { externalId?: string; external_id?: string; note: string }) {
    const { externalId, ...rest } = body;
    return this.#ok<Ok<"/api/v1/operations/{key}/resolve", "post">>("POST", operationPath(key, "resolve"), {
      body: dropUndefined({ ...rest, external_id: body.external_id ?? externalId }),
    });
  }

  cancel(key: string, body: Body<"/api/v1/operations/{key}/cancel", "post">) {
    return this.#ok<Ok<"/api/v1/operations/{key}/cancel", "post">>("POST", operationPath(key, "cancel"), { body });
  }

  take(key: string, body: { takeOver?: boolean; take_over?: boolean } = {}) {
    const takeOver = body.take_over ?? body.takeOver;
    return this.#ok<Ok<"/api/v1/operations/{key}/take", "post">>("POST", operationPath(key, "take"), {
      body: takeOver === undefined ? {} : { take_over: takeOver },
    });
  }

  release(key: string) {
    return this.#ok<Ok<"/api/v1/operations/{key}/release", "post">>("POST", operationPath(key, "release"));
  }

  applyConflict(conflictId: number, body: Body<"/api/v1/conflicts/{conflict_id}/apply", "post">) {
    return this.#ok<Ok<"/api/v1/conflicts/{conflict_id}/apply", "post">>("POST", `/api/v1/conflicts/${integer(conflictId)}/apply`, { body });
  }

  dismissConflict(conflictId: number, body: Body<"/api/v1/conflicts/{conflict_id}/dismiss", "post">) {
    return this.#ok<Ok<"/api/v1/conflicts/{conflict_id}/dismiss", "post">>("POST", `/api/v1/conflicts/${integer(conflictId)}/dismiss`, { body });
  }

  pauses(): Promise<Ok<"/api/v1/pauses", "get">> {
    return this.#ok("GET", "/api/v1/pauses");
  }

  pause(body: Body<"/api/v1/pauses", "post">): Promise<Ok<"/api/v1/pauses", "post", 201>> {
    return this.#ok("POST", "/api/v1/pauses", { body });
  }

  resume(pauseId: number): Promise<Ok<"/api/v1/pauses/{pause_id}", "delete">> {
    return this.#ok("DELETE", `/api/v1/pauses/${integer(pauseId)}`);
  }

  /** A route's 2xx body; any other answer throws `Refused`. */
  async #ok<T>(method: string, path: string, options?: RequestOptions): Promise<T> {
    const answer = await this.request(method, path, options);
    if (answer.httpStatus < 200 || answer.httpStatus >= 300) throw new Refused(answer.httpStatus, answer.body);
    return answer.body as T;
  }
}

function envelopeBody(action: string, data: JsonObject, options: ClaimOptions): JsonObject {
  if (typeof action !== "string" || !action) throw new TypeError("action is the action's name, e.g. send-invoice");
  if (!data || typeof data !== "object" || Array.isArray(data)) throw new TypeError("data is the event's data, an object");
  const occurredAt = options.occurredAt instanceof Date ? options.occurredAt.toISOString() : options.occurredAt;
  return dropUndefined({
    action,
    data,
    lease_seconds: options.leaseSeconds,
    delivery_id: options.deliveryId,
    correlation_id: options.correlationId,
    occurred_at: occurredAt,
  });
}

function keyBody(key: string, leaseSeconds?: number): JsonObject {
  if (typeof key !== "string" || !key) throw new TypeError("key is the operation's key, e.g. demo:INV-7:v1:send-invoice");
  return dropUndefined({ key, lease_seconds: leaseSeconds });
}

function isClaim(answer: Answer): boolean {
  const status = answer.body.status;
  if (answer.httpStatus >= 200 && answer.httpStatus < 300) {
    const expected = answer.httpStatus === 201 ? "claimed" : answer.httpStatus === 200 ? "done" : undefined;
    if (status !== expected || (status === "claimed" && !answer.body.token)) {
      const { token, ...shown } = answer.body; // a token never goes into an error message
      throw new ClaimError(`an answer this client cannot read: HTTP ${answer.httpStatus} ${JSON.stringify(shown).slice(0, 300)}`);
    }
    return true;
  }
  // A deferring answer this client does not know yet is still one: never act on it.
  return DEFERRING_HTTP.has(answer.httpStatus) && typeof status === "string" && status !== "" && status !== "blocked";
}

function performed(claim: Claim, didPerform: boolean): Performed {
  return dropUndefined({
    claim,
    performed: didPerform,
    status: claim.status,
    result: claim.result,
    externalId: claim.externalId,
    retryAfter: claim.retryAfter,
  }) as Performed;
}

async function reportTheError(claim: Claim, outcome: Outcome, error: unknown): Promise<void> {
  try {
    await claim.report(outcome);
  } catch (reportError) {
    // The caller's error is the one to see; the report's failure rides along with it.
    if (error && typeof error === "object") {
      try {
        Object.defineProperty(error, "reportError", { value: reportError, configurable: true, writable: true });
      } catch {
        // a frozen error: nothing to attach to
      }
    }
  }
}

/** An operation's route: the key percent-encoded as one path segment. */
function operationPath(key: string, what?: string): string {
  return `/api/v1/operations/${keySegment(key)}${what ? `/${what}` : ""}`;
}

function integer(value: number): number {
  if (!Number.isInteger(value)) throw new TypeError(`an id is an integer, not ${JSON.stringify(value)}`);
  return value;
}

function positive(value: number | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !(value > 0)) throw new TypeError(`${name} is a positive number of milliseconds`);
  return value;
}

function nonNegative(value: number | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !(value >= 0)) throw new TypeError(`${name} is a number of milliseconds, 0 or more`);
  return value;
}

function nonNegativeInteger(value: number | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || value < 0) throw new TypeError(`${name} is a whole number, 0 or more`);
  return value;
}
