// Compiled, never run (`npm test` type-checks it against the built package, as a TypeScript user's
// code is): the public API's types, from the package's `exports`, ESM side.
import { Claim, ClaimLost, Opsconsole, outcomeOfVendorCall, type Outcome, type Performed } from "opsconsole-client";

export async function aFlow(ops: Opsconsole): Promise<void> {
  const page = await ops.due({ action: "send-invoice", limit: 5 });
  const key: string = page.operations[0].key;
  const operation = await ops.operation(key);
  await ops.approve(key, { fingerprint: operation.fingerprint });
  await ops.resolve(key, { externalId: "rec-1", note: "found at the vendor" });
  const claim: Claim = await ops.claim("send-invoice", { request_id: "INV-7" }, { leaseSeconds: 30 });
  const performed: Performed = await ops.claim("send-invoice", { request_id: "INV-7" }, async (held) => ({
    externalId: held.idempotencyKey,
    result: { number: 1 },
  }));
  const outcome: Outcome = outcomeOfVendorCall({ statusCode: 429, headers: { "retry-after": "3" } });
  if (outcome.outcome === "failed") outcome.category satisfies "transient" | "permanent";
  try {
    await Claim.fromJSON(ops, claim.toJSON()).report(outcome);
  } catch (error) {
    if (!(error instanceof ClaimLost)) throw error;
  }
  await ops.pause({ scope: "action", action: "send-invoice", reason: "vendor incident" });
  console.log(performed.status);
}
