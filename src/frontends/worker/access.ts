/**
 * A frontend thread's key check (`--auth-keys`): its own copy of the keys, so an infer request with a key that
 * opens its model is served here as it would be without keys. Whatever the copy would refuse goes to the main
 * thread, which counts it, applies the one failure limit of the server and answers 401, 403 or 429.
 */
import { receiveMessageOnPort } from 'node:worker_threads';
import { AccessReplica, type AccessUpdate, type ApiGroup } from '../../auth/index.js';
import type { AuthEnds } from '../threads/protocol.js';
import { SharedSlot } from '../threads/wire.js';

export class ThreadAccess {
  private readonly replica: AccessReplica;
  private generation = -1;

  constructor(
    private readonly ends: AuthEnds,
    /** SharedSlot's slots. */
    private readonly shared: Int32Array,
  ) {
    this.replica = new AccessReplica(ends.init);
    // A thread with no request to check still takes its updates as they come (without keeping it alive).
    ends.port.on('message', (u: AccessUpdate) => this.replica.apply(u));
    ends.port.unref();
  }

  /** Whether the request may be served here; false: the main thread answers it. */
  admits(
    authorization: string | undefined,
    address: string | undefined,
    group: ApiGroup,
    model: string,
    connection?: object | string,
  ): boolean {
    const generation = Atomics.load(this.shared, SharedSlot.AuthGeneration);
    if (generation !== this.generation) {
      // The main thread posted an update before it moved the generation: take it now, not a loop turn later.
      this.generation = generation;
      for (let m = receiveMessageOnPort(this.ends.port); m !== undefined; m = receiveMessageOnPort(this.ends.port))
        this.replica.apply(m.message as AccessUpdate);
    }
    return this.replica.admits(authorization, address, group, model, connection);
  }

  close(): void {
    this.ends.port.close();
  }
}
