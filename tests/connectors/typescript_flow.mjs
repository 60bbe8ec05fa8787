// A flow's own script, as a team would write one with opsconsole-client (the built package, installed
// from its `npm pack` tarball): it claims an invoice, creates it at a vendor that takes no
// idempotency key (json-server; our key travels in the body, for the lookup) and reports. For
// tests/connectors/test_typescript_client.py; prints one JSON line per thing that happened.
//
//   node typescript_flow.mjs MODE DATA_JSON
//     once        claim(action, data, fn) once: the answer, or the error fn threw and what was reported
//     until-done  claim again while the answer says wait (in progress, retry later, held), and after a
//                 failure it reported, until done or an answer that waits for a person or a lookup
//     crash       claim, create the invoice, print "acted" and hang there (the test SIGKILLs it)
//     batch       DATA_JSON a list: claimBatch of them all, then each claimed one performed
//
// Environment: OPSCONSOLE_URL, OPSCONSOLE_TOKEN, VENDOR_URL, ACTION; LEASE_SECONDS (30),
// VENDOR_TIMEOUT_MS (5000); GO_FILE: once claimed, wait until this file exists before calling the vendor.
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import { Opsconsole, Refused, VendorCallError } from "opsconsole-client";

const [mode, dataJson] = process.argv.slice(2);
const data = JSON.parse(dataJson);
const env = process.env;
const ops = new Opsconsole({ baseUrl: env.OPSCONSOLE_URL, token: env.OPSCONSOLE_TOKEN, backoffMs: 200, timeoutMs: 20_000 });
const leaseSeconds = Number(env.LEASE_SECONDS ?? 30);
const vendorTimeoutMs = Number(env.VENDOR_TIMEOUT_MS ?? 5000);
const WAITING = new Set(["in_progress", "retry_later", "waiting", "held"]);

function say(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, pid: process.pid, ...fields }) + "\n");
}

let held; // the claim fn was given, to say what was reported when fn threw

async function createInvoice(claim, invoiceData = data) {
  held = claim;
  say("acting", { key: claim.key, attempt: claim.attempt });
  while (env.GO_FILE && !existsSync(env.GO_FILE)) await sleep(20);
  const response = await fetch(`${env.VENDOR_URL}/invoices`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": claim.idempotencyKey },
    body: JSON.stringify({ idempotency_key: claim.idempotencyKey, ...invoiceData }),
    signal: AbortSignal.timeout(vendorTimeoutMs),
  });
  const text = await response.text();
  if (!response.ok) {
    throw new VendorCallError(`the vendor answered HTTP ${response.status}`, { sent: true, statusCode: response.status, headers: response.headers });
  }
  const invoice = JSON.parse(text);
  if (mode === "crash") {
    say("acted", { id: String(invoice.id) });
    setInterval(() => {}, 1000); // killed here, before any report
    await new Promise(() => {});
  }
  return { externalId: invoice.id, result: { invoice: invoice.id } };
}

async function claimOnce() {
  held = undefined;
  try {
    const answer = await ops.claim(env.ACTION, data, createInvoice, { leaseSeconds });
    say("answer", {
      performed: answer.performed,
      status: answer.status,
      httpStatus: answer.claim.httpStatus,
      externalId: answer.externalId ?? null,
      retryAfter: answer.retryAfter ?? null,
    });
    return answer;
  } catch (error) {
    say("error", {
      name: error.name,
      message: String(error.message).slice(0, 300),
      reported: held?.reported ?? null,
      status: held?.status ?? null,
      reportError: error.reportError ? String(error.reportError) : null,
    });
    return undefined;
  }
}

if (mode === "once" || mode === "crash") {
  await claimOnce();
} else if (mode === "until-done") {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const answer = await claimOnce();
    if (answer && !WAITING.has(answer.status)) break;
    // Claims are safe to repeat: poll sooner than a long Retry-After, never faster than 5 a second.
    await sleep(Math.max(200, Math.min((answer?.retryAfter ?? 0.5) * 1000, 1000)));
  }
} else if (mode === "batch") {
  // DATA_JSON is a list of invoices: claimed in one request, each claimed one performed on its own.
  const items = await ops.claimBatch(data.map((invoiceData) => ({ action: env.ACTION, data: invoiceData, leaseSeconds })));
  for (const [place, item] of items.entries()) {
    if (item instanceof Refused) {
      say("refused", { place, httpStatus: item.httpStatus, reason: item.reason });
      continue;
    }
    const answer = await ops.perform(item, (claim) => createInvoice(claim, data[place]));
    say("answer", { place, key: item.key, performed: answer.performed, status: answer.status, httpStatus: item.httpStatus, externalId: answer.externalId ?? null });
  }
} else {
  say("error", { name: "Usage", message: `unknown mode ${mode}` });
  process.exitCode = 2;
}
