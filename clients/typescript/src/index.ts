/**
 * opsconsole-client: opsconsole's API for flows, and the claims protocol in the library.
 *
 *     import { Opsconsole } from "opsconsole-client";
 *     const ops = new Opsconsole({ baseUrl: "http://127.0.0.1:8000", token: process.env.OPSCONSOLE_TOKEN });
 *     const done = await ops.claim("send-invoice", data, async (claim) => {
 *       const invoice = await vendor.create(data, claim.idempotencyKey);
 *       return { externalId: invoice.id, result: { number: invoice.number } };
 *     });
 */

export { Opsconsole } from "./client.js";
export type { ClaimBatchItem, ClaimOptions, EventEnvelope, OpsconsoleOptions, Perform, Performance, Performed, SubmitAnswer } from "./client.js";
export { Claim, claimPath } from "./claim.js";
export type { ClaimJSON, Report, Requester } from "./claim.js";
export { HeldClaims } from "./held.js";
export type { HoldOptions } from "./held.js";
export { Ambiguous, ClaimError, ClaimLost, Permanent, Refused, ServiceUnavailable, VendorCallError } from "./errors.js";
export type { JsonObject } from "./errors.js";
export { ERROR_LIMIT, NOT_SENT_CODES, outcomeOfError, outcomeOfVendorCall } from "./outcome.js";
export type { Outcome, VendorCall } from "./outcome.js";
export { retryAfterSeconds } from "./transport.js";
export type { Answer, RequestOptions } from "./transport.js";
export type { components, operations, paths } from "./openapi.js";
