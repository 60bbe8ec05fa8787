// The npm senders' signing code for tests/signers.py, one signature per run: a JSON request on
// stdin, {"scheme": "github" | "stripe", "secret": "...", "payload": "<the body, as text>",
// "timestamp": <Unix seconds, stripe only>}, and {"header": "<the signature header's value>"} on
// stdout. The packages come from the repository's package-lock.json (`make node_modules`).
import { readFileSync } from "node:fs";

const request = JSON.parse(readFileSync(0, "utf8"));
let header;
if (request.scheme === "github") {
  // GitHub's own signing method: "sha256=" and the hex HMAC-SHA256 of the body.
  const { sign } = await import("@octokit/webhooks-methods");
  header = await sign(request.secret, request.payload);
} else if (request.scheme === "stripe") {
  // stripe-node's test helper, the Stripe-Signature header as Stripe sends it: "t=...,v1=...".
  // The key is a placeholder: building the client makes no call, and signing needs none.
  const { default: Stripe } = await import("stripe");
  const stripe = new Stripe("sk_test_signers_no_calls");
  header = stripe.webhooks.generateTestHeaderString({
    payload: request.payload,
    secret: request.secret,
    timestamp: request.timestamp,
  });
} else {
  throw new Error(`unknown scheme: ${JSON.stringify(request.scheme)}`);
}
process.stdout.write(JSON.stringify({ header }) + "\n");
