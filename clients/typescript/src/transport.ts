/**
 * Requests to opsconsole, retried while the service itself fails.
 *
 * A network error, a timeout, a 5xx, a 408 or 429 (a proxy's: opsconsole sends neither) or an answer
 * that is not a JSON object (a proxy's page, an empty body) is retried with exponential backoff and
 * jitter (a Retry-After header wins over the computed delay, up to `maxBackoffMs`), at most
 * `maxRetries` times, then thrown as `ServiceUnavailable`. Redirects are not followed (a claim's token
 * is in the body): a 3xx is returned, and refused by its caller. Every request this client sends is
 * safe to send again: a claim answered again is the operation's current answer, and a report repeated
 * with the same token and body is answered as the first one was. Any other answer (opsconsole's JSON,
 * 2xx or 4xx) is returned to be read.
 */

import { ServiceUnavailable, type JsonObject } from "./errors.js";

export const USER_AGENT = "opsconsole-client/0.1.0";

export interface TransportOptions {
  baseUrl: string;
  token: string;
  timeoutMs: number;
  maxRetries: number;
  backoffMs: number;
  maxBackoffMs: number;
  fetch: typeof fetch;
}

/** One answer that is not the service's own failure. */
export interface Answer {
  httpStatus: number;
  body: JsonObject;
  headers: Headers;
}

export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | null | undefined>;
  /** Retries after the first try; the client's `maxRetries` when not given. */
  retries?: number;
}

export class Transport {
  constructor(private readonly options: TransportOptions) {}

  get maxRetries(): number {
    return this.options.maxRetries;
  }

  async request(method: string, path: string, request: RequestOptions = {}): Promise<Answer> {
    const retries = request.retries ?? this.options.maxRetries;
    const url = this.url(path, request.query);
    for (let attempt = 1; ; attempt++) {
      let failure: unknown;
      let httpStatus: number | undefined;
      let retryAfter: number | undefined;
      try {
        const response = await this.send(method, url, request.body);
        httpStatus = response.status;
        retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
        if (!isServiceFailure(response.status)) {
          const body = await jsonObject(response);
          if (body !== undefined) return { httpStatus, body, headers: response.headers };
          // Not followed (the claim's token is in the body): whoever answers it is refused.
          if (isRedirect(httpStatus)) return { httpStatus, body: redirected(response), headers: response.headers };
          // A page or an empty body: a proxy or something else than opsconsole answered.
          failure = new Error(`HTTP ${httpStatus} with no JSON object (${response.headers.get("content-type") || "no content type"}): not opsconsole's answer`);
        } else {
          await response.body?.cancel().catch(() => undefined);
        }
      } catch (error) {
        failure = error;
      }
      if (attempt > retries) {
        const why = failure === undefined ? `HTTP ${httpStatus}` : describe(failure);
        throw new ServiceUnavailable(`opsconsole did not answer ${method} ${path} after ${attempt} attempts: ${why}`, {
          attempts: attempt,
          httpStatus,
          retryAfter,
          cause: failure,
        });
      }
      await sleep(this.delayMs(attempt, retryAfter));
    }
  }

  /** Milliseconds before the next attempt: the server's Retry-After if it gave one, else
   * backoff * 2^(attempt-1) with equal jitter; never more than maxBackoffMs. */
  delayMs(attempt: number, retryAfterSeconds?: number): number {
    if (retryAfterSeconds !== undefined) return Math.min(retryAfterSeconds * 1000, this.options.maxBackoffMs);
    const ceiling = Math.min(this.options.backoffMs * 2 ** (attempt - 1), this.options.maxBackoffMs);
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }

  private send(method: string, url: string, body: unknown): Promise<Response> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.options.token}`,
      "User-Agent": USER_AGENT,
      Accept: "application/json",
    };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return this.options.fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(this.options.timeoutMs),
      redirect: "manual",
    });
  }

  private url(path: string, query: RequestOptions["query"]): string {
    const url = new URL(this.options.baseUrl.replace(/\/+$/, "") + path);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Retry-After in seconds: a number of seconds (what opsconsole sends) or an HTTP date. */
export function retryAfterSeconds(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

/** The service failing, whoever answered: a 5xx, a proxy's timeout (408) or rate limit (429);
 * opsconsole itself answers neither. */
function isServiceFailure(status: number): boolean {
  return status >= 500 || status === 408 || status === 429;
}

function isRedirect(status: number): boolean {
  return status >= 300 && status < 400;
}

function redirected(response: Response): JsonObject {
  const location = response.headers.get("location");
  return { status: "", message: `a redirect${location ? ` to ${location.slice(0, 200)}` : ""}, not followed: set baseUrl to where opsconsole answers` };
}

/** The answer's JSON object, or undefined when it is not one (a page, an empty body). */
async function jsonObject(response: Response): Promise<JsonObject | undefined> {
  const text = await response.text();
  try {
    const body: unknown = JSON.parse(text);
    if (body && typeof body === "object" && !Array.isArray(body)) return body as JsonObject;
  } catch {
    // not JSON
  }
  return undefined;
}

export function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.name}: ${error.cause.message})` : "";
    return `${error.name}: ${error.message}${cause}`;
  }
  return String(error);
}

/** A request body without the fields the caller did not give (JSON has no undefined). */
export function dropUndefined<T extends Record<string, unknown>>(object: T): T {
  return Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined)) as T;
}
