import type { Claim } from "opsconsole-client";

/**
 * The claims an n8n process keeps alive between a Claim node and its Report node: n8n runs the nodes
 * of one execution in one process, so the lease is extended every third of it while the vendor call
 * (the nodes in between) runs. A claim is let go at its report, or after `limitSeconds` however the
 * execution ended: a workflow that never reaches its report then lets the lease expire (the operation
 * becomes unknown, for a lookup or a person), instead of holding it for ever.
 */
const kept = new Map<string, { claim: Claim; limit: ReturnType<typeof setTimeout> }>();

export function keepAlive(claim: Claim, limitSeconds: number): void {
  if (!claim.token || limitSeconds <= 0) return;
  claim.startHeartbeat();
  const limit = setTimeout(() => letGo(claim.token as string), limitSeconds * 1000);
  limit.unref?.();
  kept.set(claim.token, { claim, limit });
}

/** The live claim of this token, if this process holds it (its heartbeat stops at its report). */
export function heldClaim(token: string | undefined): Claim | undefined {
  return token ? kept.get(token)?.claim : undefined;
}

export function letGo(token: string | undefined): void {
  const entry = token ? kept.get(token) : undefined;
  if (!entry) return;
  entry.claim.stopHeartbeat();
  clearTimeout(entry.limit);
  kept.delete(token as string);
}

export function heldCount(): number {
  return kept.size;
}
