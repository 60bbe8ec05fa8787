/**
 * The claims a process holds between acting and reporting, for a flow runtime (Node-RED, n8n) whose
 * claim and report are separate nodes of one process: each held claim's heartbeats run here, and each
 * has a cap, so a flow that never reaches its report lets the lease expire (the operation becomes
 * unknown, for a lookup or a person) instead of holding it for ever.
 */

import type { Claim } from "./claim.js";

export interface HoldOptions {
  /** After this long without a report, the heartbeats stop and the lease is left to expire. */
  maxHoldSeconds: number;
  /** Who holds it (a node): `releaseAll(owner)` lets go of everything it holds (a redeploy, a stop). */
  owner?: unknown;
  /** Told when the claim is given up at `maxHoldSeconds`. */
  onGiveUp?: (claim: Claim) => void;
}

interface Entry {
  claim: Claim;
  timer: ReturnType<typeof setTimeout>;
  owner: unknown;
}

/** One registry per process, shared by its claim and report nodes; a claim is known by its token
 * (unique to the claim: the operation, the attempt and a secret). */
export class HeldClaims {
  private readonly held = new Map<string, Entry>();

  /** Start the claim's heartbeats and keep it until `take`/`release`, or until `maxHoldSeconds`.
   * A claim without a token (nothing to act on) or a cap of 0 is not held: no heartbeats. */
  hold(claim: Claim, { maxHoldSeconds, owner, onGiveUp }: HoldOptions): void {
    const token = claim.token;
    if (!token || !(maxHoldSeconds > 0)) return;
    this.release(token); // a claim held again starts afresh
    claim.startHeartbeat();
    const timer = setTimeout(() => {
      if (this.held.get(token)?.claim !== claim) return;
      this.release(token);
      onGiveUp?.(claim);
    }, maxHoldSeconds * 1000);
    (timer as { unref?: () => void }).unref?.();
    this.held.set(token, { claim, timer, owner });
  }

  /** The live claim of `token`, if this process holds it. */
  get(token: string | undefined): Claim | undefined {
    return token ? this.held.get(token)?.claim : undefined;
  }

  /** The live claim of `token`, no longer held here: its heartbeats go on until its report stops them. */
  take(token: string | undefined): Claim | undefined {
    const entry = token ? this.held.get(token) : undefined;
    if (!entry) return undefined;
    clearTimeout(entry.timer);
    this.held.delete(token as string);
    return entry.claim;
  }

  /** Let go of `token`'s claim: its heartbeats stop (its lease runs out unless it was reported). */
  release(token: string | undefined): void {
    this.take(token)?.stopHeartbeat();
  }

  /** Let go of every claim `owner` holds. */
  releaseAll(owner: unknown): void {
    for (const [token, entry] of this.held) {
      if (entry.owner === owner) this.release(token);
    }
  }

  get size(): number {
    return this.held.size;
  }
}
