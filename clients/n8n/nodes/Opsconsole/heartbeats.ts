import { HeldClaims, type Claim } from "opsconsole-client";

/**
 * The claims an n8n process keeps alive between a Claim node and its Report node (the client's
 * HeldClaims): n8n runs the nodes of one execution in one process, so the lease is extended every
 * third of it while the vendor call (the nodes in between) runs. A claim is let go at its report, or
 * after `limitSeconds` however the execution ended: a workflow that never reaches its report then
 * lets the lease expire (the operation becomes unknown, for a lookup or a person), instead of
 * holding it for ever.
 */
const kept = new HeldClaims();

export function keepAlive(claim: Claim, limitSeconds: number): void {
  kept.hold(claim, { maxHoldSeconds: limitSeconds });
}

/** The live claim of this token, if this process holds it (its heartbeat stops at its report). */
export function heldClaim(token: string | undefined): Claim | undefined {
  return kept.get(token);
}

export function letGo(token: string | undefined): void {
  kept.release(token);
}

export function heldCount(): number {
  return kept.size;
}
