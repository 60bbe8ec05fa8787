// Types only: n8n-workflow is n8n's own copy at run time, not a dependency of this package (so the
// package installs into an empty folder); n8n shows an Error a node throws as that node's error.
import type { IDataObject, IExecuteFunctions, INodeExecutionData, INodeType, INodeTypeDescription } from "n8n-workflow";
import {
  Claim,
  Opsconsole as Client,
  Refused,
  ServiceUnavailable,
  outcomeOfVendorCall,
  type ClaimBatchItem,
  type ClaimJSON,
} from "opsconsole-client";

import { heldClaim, keepAlive, letGo } from "./heartbeats";
import { properties } from "./properties";

/** An error n8n shows on the node, with the item it is about. */
export class NodeError extends Error {
  readonly itemIndex: number;
  readonly description?: string;

  constructor(message: string, options: { itemIndex: number; description?: string }) {
    super(message);
    this.name = "NodeError";
    this.itemIndex = options.itemIndex;
    this.description = options.description;
  }
}

/** The claim operations' outputs, in order: what the flow does with each answer (docs/claims.md). */
export const CLAIM_OUTPUTS = ["Act", "Done", "Wait", "Person"] as const;
const ACT = 0;
const DONE = 1;
const WAIT = 2;
const PERSON = 3;
/** Answers that say "not now, claim again later": the Wait output, with retryAfter. */
const LATER = new Set(["in_progress", "retry_later", "waiting", "held"]);

type Item = INodeExecutionData;
type Outputs = Item[][];

export class Opsconsole implements INodeType {
  description: INodeTypeDescription = {
    displayName: "Opsconsole",
    name: "opsconsole",
    icon: "file:opsconsole.svg",
    group: ["transform"],
    version: 1,
    subtitle: '={{$parameter["resource"] + " › " + $parameter["operation"]}}',
    description:
      "Claim an action before the workflow performs it, report what the vendor answered, submit events, and decide operations in opsconsole",
    defaults: { name: "Opsconsole" },
    inputs: ["main"],
    // A claim has four outputs (act, done, wait, a person decides); every other operation one.
    outputs: `={{ ["claim", "claimByKey"].includes($parameter["operation"]) && $parameter["resource"] === "claim" ? ${JSON.stringify(
      CLAIM_OUTPUTS.map((name) => ({ type: "main", displayName: name })),
    )} : ["main"] }}`,
    credentials: [{ name: "opsconsoleApi", required: true }],
    properties,
  };

  async execute(this: IExecuteFunctions): Promise<Outputs> {
    const resource = this.getNodeParameter("resource", 0) as string;
    const operation = this.getNodeParameter("operation", 0) as string;
    const credentials = await this.getCredentials("opsconsoleApi");
    const ops = new Client({ baseUrl: baseUrl(credentials.url), token: String(credentials.token) });
    const items = this.getInputData();
    if (resource === "claim" && (operation === "claim" || operation === "claimByKey")) {
      return claimItems(this, ops, operation, items.length);
    }
    const reporting = resource === "claim" && operation === "report";
    const outputs: Outputs = [[]];
    let firstFailure: NodeError | undefined;
    for (let index = 0; index < items.length; index++) {
      const pairedItem = { item: index };
      try {
        for (const json of await runItem(this, ops, resource, operation, index)) outputs[0].push({ json, pairedItem });
      } catch (error) {
        const failure = explain(error, index);
        if (!this.continueOnFail()) {
          // Each item's vendor call has ended: the other items are reported before the node fails,
          // or a success the vendor answered would be lost to the lease's expiry (unknown).
          if (reporting) {
            firstFailure ??= failure;
            continue;
          }
          throw failure;
        }
        outputs[0].push({ json: { error: failure.message }, pairedItem });
      }
    }
    if (firstFailure) throw firstFailure;
    return outputs;
  }
}

/** The most claims opsconsole takes in one batch (OPSCONSOLE_MAX_CLAIM_BATCH's default): more items
 * go as several batches (a server set lower: the client sends each again in pieces of the limit its
 * 413 batch_too_large names). */
export const MAX_CLAIM_BATCH = 100;

/** One item's claim, its parameters read and checked before anything is claimed. */
interface Prepared {
  index: number;
  claim: ClaimBatchItem;
  /** The data sent (a claim by key's comes with its 201). */
  data?: IDataObject;
  keepAliveSeconds: number;
}

/** An item's answer: its output and item, or why it has none (the node's error, or Person's). */
type Answered = [number, IDataObject] | Error;

/**
 * The claim operations: every item's parameters read and checked first (a bad one fails the node
 * before anything is claimed), then the items claimed in batches of at most MAX_CLAIM_BATCH, one
 * request each (a lone item: one claim, `POST /claims`), each answered as a claim of it alone. The
 * items leave in their order, each paired with its input item. Without Continue On Fail, an item
 * whose claim failed fails the node once its batch is answered, and the claims made for the other
 * items are given back (their items never left the node).
 */
async function claimItems(context: IExecuteFunctions, ops: Client, operation: string, count: number): Promise<Outputs> {
  const answers: Answered[] = new Array(count);
  const prepared: Prepared[] = [];
  for (let index = 0; index < count; index++) {
    try {
      prepared.push(prepare(context, operation, index));
    } catch (error) {
      if (!context.continueOnFail()) throw explain(error, index);
      answers[index] = error as Error;
    }
  }
  const acted: Item[] = [];
  for (let start = 0; start < prepared.length; start += MAX_CLAIM_BATCH) {
    const batch = prepared.slice(start, start + MAX_CLAIM_BATCH);
    const claims = await claimBatch(ops, batch);
    for (const [place, item] of batch.entries()) {
      const answer = answered(item, claims[place]);
      answers[item.index] = answer;
      if (!(answer instanceof Error) && answer[0] === ACT) acted.push({ json: answer[1] });
    }
    const failed = batch.find((item) => answers[item.index] instanceof Error);
    if (failed && !context.continueOnFail()) {
      // The node's items are lost with the error: the claims it made would be held and then
      // expire to unknown (a person to decide) though no vendor was called.
      await giveBack(ops, acted, failed.index);
      throw explain(answers[failed.index], failed.index);
    }
  }
  const outputs: Outputs = [[], [], [], []];
  for (const [index, answer] of answers.entries()) {
    const pairedItem = { item: index };
    if (answer instanceof Error) outputs[PERSON].push({ json: { error: explain(answer, index).message }, pairedItem });
    else outputs[answer[0]].push({ json: answer[1], pairedItem });
  }
  return outputs;
}

function prepare(context: IExecuteFunctions, operation: string, index: number): Prepared {
  const leaseSeconds = context.getNodeParameter("leaseSeconds", index, 120) as number;
  const keepAliveSeconds = heartbeatLimit(context, index);
  if (operation === "claimByKey") {
    const key = String(context.getNodeParameter("key", index));
    // The client's own check, made here: in a batch it would refuse the whole list.
    if (!key) throw new TypeError("key is the operation's key, e.g. demo:INV-7:v1:send-invoice");
    return { index, claim: { key, leaseSeconds }, keepAliveSeconds };
  }
  const action = context.getNodeParameter("action", index) as string;
  const data = jsonObject(context, context.getNodeParameter("data", index), "Data", index);
  if (typeof action !== "string" || !action) throw new TypeError("action is the action's name, e.g. send-invoice");
  const deliveryId = (context.getNodeParameter("deliveryId", index, "") as string) || undefined;
  return { index, claim: { action, data: data as never, leaseSeconds, deliveryId }, data, keepAliveSeconds };
}

/** Each item's claim or refusal, in order; an error of the whole request (opsconsole unavailable,
 * the token refused) is each item's, as it would have been alone. */
async function claimBatch(ops: Client, batch: Prepared[]): Promise<(Claim | Error)[]> {
  try {
    if (batch.length > 1) return await ops.claimBatch(batch.map((item) => item.claim));
    const { claim } = batch[0];
    return [await ("key" in claim ? ops.claimByKey(claim.key, claim) : ops.claim(claim.action, claim.data, claim))];
  } catch (error) {
    return batch.map(() => error as Error);
  }
}

/** An item's output from its claim's answer (docs/claims.md): only a 201 acts, and is kept alive. */
function answered(item: Prepared, claim: Claim | Error): Answered {
  if (claim instanceof Refused && (claim.body as IDataObject).status === "blocked") {
    // blocked (a payload conflict, a stale version, invalid data): the claim's answer that a person
    // must fix the data or the key. Other refusals (the token, its scopes) fail the node.
    const body = claim.body as IDataObject;
    const message = String(body.detail ?? body.message ?? body.reason ?? "blocked");
    return [PERSON, { status: "blocked", reason: body.reason ?? null, httpStatus: claim.httpStatus, message, answer: body }];
  }
  if (claim instanceof Error) return claim;
  const data = item.data ?? (claim.data as IDataObject | undefined);
  const base: IDataObject = { status: claim.status, key: claim.key, httpStatus: claim.httpStatus };
  if (claim.shouldAct) {
    keepAlive(claim, item.keepAliveSeconds);
    return [ACT, { ...base, idempotencyKey: claim.idempotencyKey ?? null, attempt: claim.attempt ?? null, data: data ?? null, claim: claim.toJSON() as unknown as IDataObject }];
  }
  if (claim.status === "done") {
    return [DONE, { ...base, externalId: claim.externalId ?? null, result: (claim.result ?? null) as IDataObject }];
  }
  if (LATER.has(claim.status)) {
    const retryAfter = claim.retryAfter ?? 60;
    return [WAIT, { ...base, retryAfter, message: claim.message ?? null }];
  }
  // Everything else, and any status this node does not know, is never "act".
  return [PERSON, { ...base, message: claim.message ?? String(claim.answer.reason ?? claim.status), answer: claim.answer as IDataObject }];
}

async function runItem(
  context: IExecuteFunctions,
  ops: Client,
  resource: string,
  operation: string,
  index: number,
): Promise<IDataObject[]> {
  const param = (name: string, fallback?: unknown) => context.getNodeParameter(name, index, fallback);
  const text = (name: string) => String(param(name, "") ?? "");
  const optional = (name: string) => text(name) || undefined;
  switch (`${resource}.${operation}`) {
    case "claim.report":
      return [await report(context, ops, index)];
    case "event.submit": {
      const answer = await ops.submitEvent({
        action: text("action"),
        data: jsonObject(context, param("data"), "Data", index) as never,
        delivery_id: optional("deliveryId"),
      });
      return [{ ...(answer.body as IDataObject), httpStatus: answer.httpStatus }];
    }
    case "due.list": {
      const page = await ops.due({ action: optional("action"), limit: param("limit", 50) as number });
      return page.operations as unknown as IDataObject[];
    }
    case "operation.get":
      return [(await ops.operation(text("key"))) as unknown as IDataObject];
    case "operation.list": {
      const state = optional("state");
      const page = await ops.operations({ state, action: optional("action"), limit: param("limit", 50) as number } as never);
      return (page as unknown as { operations: IDataObject[] }).operations;
    }
    case "operation.approve":
      return [(await ops.approve(text("key"), { fingerprint: text("fingerprint"), reason: optional("reason") } as never)) as unknown as IDataObject];
    case "operation.reject":
      return [(await ops.reject(text("key"), { fingerprint: optional("fingerprint"), reason: text("reason") } as never)) as unknown as IDataObject];
    case "operation.replay":
      return [(await ops.replay(text("key"), { reason: optional("reason") } as never)) as unknown as IDataObject];
    case "operation.resolve":
      return [(await ops.resolve(text("key"), { externalId: text("externalId"), note: text("note") })) as unknown as IDataObject];
    case "operation.cancel":
      return [(await ops.cancel(text("key"), { reason: optional("reason") } as never)) as unknown as IDataObject];
    case "pause.create": {
      const scope = text("scope");
      const body = { scope, reason: text("reason"), action: scope === "action" ? text("action") : undefined, destination: scope === "destination" ? text("destination") : undefined };
      return [(await ops.pause(body as never)) as unknown as IDataObject];
    }
    case "pause.resume":
      return [(await ops.resume(param("pauseId") as number)) as unknown as IDataObject];
  }
  throw new NodeError(`unknown operation ${operation} of ${resource}`, { itemIndex: index });
}

/**
 * The report after the vendor call: the vendor's answer (an HTTP Request node's status code, headers
 * and body, or the error it continued with) read by opsconsole-client's outcomeOfVendorCall, the one
 * place an answer becomes succeeded, failed or unknown. The report is retried until it is recorded.
 */
async function report(context: IExecuteFunctions, ops: Client, index: number): Promise<IDataObject> {
  const carried = context.getNodeParameter("claim", index) as unknown;
  const json = (typeof carried === "string" ? parseJson(context, carried, "Claim", index) : carried) as ClaimJSON | undefined;
  if (!json || typeof json !== "object" || !json.token) {
    throw new NodeError("Claim is not a claim to report: set it to the Act output's claim, e.g. {{ $('Claim').item.json.claim }}",
      { itemIndex: index },
    );
  }
  // However the report ends (recorded, refused, or a parameter that fails before anything is
  // sent), this process stops extending the claim.
  try {
    const claim = heldClaim(json.token) ?? Claim.fromJSON(ops, json);
    const statusCode = context.getNodeParameter("statusCode", index, "") as number | string;
    const error = context.getNodeParameter("vendorError", index, "") as unknown;
    const externalId = context.getNodeParameter("externalId", index, "") as string | number;
    const outcome = outcomeOfVendorCall({
      statusCode: statusCode === "" || statusCode === null ? undefined : statusCode,
      headers: (context.getNodeParameter("headers", index, {}) as IDataObject) ?? {},
      error: vendorError(error),
      externalId: externalId === "" || externalId === null ? undefined : String(externalId),
      result: resultObject(context.getNodeParameter("result", index, undefined)) as never,
    });
    const recorded = await claim.report(outcome);
    return {
      status: recorded.status,
      state: recorded.state,
      key: claim.key,
      outcome: outcome.outcome,
      category: outcome.outcome === "failed" ? outcome.category : null,
      retryAfter: outcome.outcome === "failed" ? (outcome.retryAfter ?? null) : null,
      nextAttemptAt: recorded.nextAttemptAt ?? null,
    };
  } finally {
    letGo(json.token);
  }
}

/** The HTTP Request node's error item is plain JSON ({message, code, ...}): an Error again, so its
 * message (not the request, which may carry the payload) goes with the code into the report. A URL
 * in the message is cut to its origin by the client, as every error text it sends. */
function vendorError(error: unknown): unknown {
  if (error === "" || error === null || error === undefined) return undefined;
  if (typeof error !== "object") return error;
  const { message, code } = error as { message?: unknown; code?: unknown };
  return Object.assign(new Error(typeof message === "string" ? message : "the vendor call failed"), {
    code: typeof code === "string" ? code : undefined,
  });
}

/** The Result if it is a JSON object (or its JSON text), the only result opsconsole records; else
 * nothing: a 2xx whose answer is a list, a text or an HTML page is still a success to report. */
function resultObject(value: unknown): IDataObject | undefined {
  let parsed = value;
  if (typeof value === "string") {
    try {
      parsed = JSON.parse(value);
    } catch {
      return undefined;
    }
  }
  return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as IDataObject) : undefined;
}

/** The credential's URL, refused when it carries a user or a password: fetch would refuse it with
 * an error that repeats the URL, password and all, into the node's error and the execution data. */
function baseUrl(value: unknown): string {
  const url = String(value ?? "").trim();
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new NodeError("The credential's URL is not a URL: set it to opsconsole's address, e.g. https://ops.example.com", { itemIndex: 0 });
  }
  if (parsed.username || parsed.password) {
    throw new NodeError("The credential's URL must not carry a user or a password (the token is the credential)", { itemIndex: 0 });
  }
  return url;
}

export const HEARTBEAT_LIMIT_MAX_SECONDS = 86_400;

/** Keep the Claim Alive For at Most, checked: a negative, a non-number or one past setTimeout's
 * range (24.8 days) would end the heartbeats at once, and the claim expire under a slow vendor. */
function heartbeatLimit(context: IExecuteFunctions, index: number): number {
  const value = context.getNodeParameter("heartbeatLimitSeconds", index, 600) as unknown;
  const seconds = typeof value === "string" && value.trim() !== "" ? Number(value) : value;
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds < 0 || seconds > HEARTBEAT_LIMIT_MAX_SECONDS) {
    throw new NodeError(
      `Keep the Claim Alive For at Most (Seconds) must be a number from 0 (no heartbeat) to ${HEARTBEAT_LIMIT_MAX_SECONDS}, not ${JSON.stringify(value)}`,
      { itemIndex: index },
    );
  }
  return seconds;
}

/** The claims this node made before it failed on item `failedAt`, reported failed (transient): their
 * items never left the node, so no vendor was called; opsconsole hands the work out again. */
async function giveBack(ops: Client, acted: Item[], failedAt: number): Promise<void> {
  for (const item of acted) {
    const json = item.json.claim as unknown as ClaimJSON;
    const claim = heldClaim(json.token) ?? Claim.fromJSON(ops, json);
    try {
      await claim.failed({ category: "transient", error: `not performed: the Claim node failed on item ${failedAt}` });
    } catch {
      // Not recorded (opsconsole unreachable): the lease expires to unknown, as before.
    } finally {
      letGo(json.token);
    }
  }
}

function jsonObject(context: IExecuteFunctions, value: unknown, name: string, index: number): IDataObject {
  const parsed = typeof value === "string" ? parseJson(context, value, name, index) : value;
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new NodeError(`${name} must be a JSON object`, { itemIndex: index });
  }
  return parsed as IDataObject;
}

function parseJson(context: IExecuteFunctions, text: string, name: string, index: number): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new NodeError(`${name} is not valid JSON`, { itemIndex: index });
  }
}

/** A refusal or an outage as n8n shows errors: what opsconsole said, never the token or the payload. */
function explain(error: unknown, index: number): NodeError {
  if (error instanceof NodeError) return error;
  if (error instanceof Refused) {
    const body = error.body as IDataObject;
    const reason = String(body.reason ?? body.status ?? "");
    const detail = String(body.detail ?? body.message ?? "");
    return new NodeError(`opsconsole refused (${error.httpStatus} ${reason}): ${detail}`.trim(), {
      itemIndex: index,
      description: body.errors ? JSON.stringify(body.errors) : undefined,
    });
  }
  if (error instanceof ServiceUnavailable) {
    return new NodeError(`opsconsole is unavailable: ${error.message}`, { itemIndex: index });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new NodeError(message, { itemIndex: index });
}
