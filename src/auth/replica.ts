/**
 * A copy of the keys on a frontend thread: it lets through what the main thread's AccessControl would, and leaves
 * every refusal to the main thread, which counts it, applies the failure limit (one per server, however many
 * threads) and answers it. The copy follows the main thread's updates: a reload, an address reaching the limit.
 */
import { AccessControl, type AccessUpdate, type KeysSnapshot, keysFromSnapshot } from './access.js';
import type { ApiGroup } from './scopes.js';

export interface ReplicaInit {
  readonly keys: KeysSnapshot;
  /** Addresses refused now, with when each may be checked again (ms since the epoch). */
  readonly limited: ReadonlyArray<readonly [address: string, untilMs: number]>;
}

export class AccessReplica {
  /** The checks, with no failure limit of its own (refusals go to the main thread's). */
  private readonly access: AccessControl;
  private readonly limited = new Map<string, number>();

  constructor(
    init: ReplicaInit,
    private readonly now: () => number = Date.now,
  ) {
    this.access = new AccessControl(keysFromSnapshot(init.keys), { failureLimit: 0 });
    for (const [address, until] of init.limited) this.limited.set(address, until);
  }

  apply(update: AccessUpdate): void {
    if (update.t === 'keys') this.access.replaceKeys(keysFromSnapshot(update.keys));
    else this.limited.set(update.address, update.untilMs);
  }

  /**
   * Whether the request may go on: true exactly where the main thread's check would let it (for the same keys and
   * limited addresses); false where the main thread must answer it.
   */
  admits(
    authorization: string | undefined,
    address: string | undefined,
    group: ApiGroup,
    model?: string,
    connection?: object | string,
  ): boolean {
    // As on the main thread, a limited address is refused whatever key it sends; without a key it is anonymous.
    if (this.limited.size > 0 && authorization !== undefined && authorization !== '' && this.isLimited(address ?? ''))
      return false;
    return this.access.check(authorization, address, group, model, connection) === undefined;
  }

  private isLimited(address: string): boolean {
    const until = this.limited.get(address);
    if (until === undefined) return false;
    if (until > this.now()) return true;
    this.limited.delete(address);
    return false;
  }
}
