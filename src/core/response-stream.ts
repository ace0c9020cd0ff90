/**
 * The responses of one request as Server.inferStream() hands them out: the
 * backend (through ResponseSender) or the core pushes, the caller iterates.
 * Items wait in a queue until the caller asks for them; once the caller
 * stops iterating, further responses are dropped.
 */
import type { BackendResponse, ResponseSender } from '../backends/backend.js';
import { type NereidError, asNereidError } from '../errors.js';
import type { InferRequest, InferResponse, StreamResponse } from '../types/api.js';

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

class Item implements StreamResponse {
  constructor(
    readonly response: InferResponse | undefined,
    readonly error: NereidError | undefined,
    readonly final: boolean,
  ) {}
}

export class ResponseStream implements ResponseSender, AsyncIterableIterator<StreamResponse> {
  private readonly queue: Item[] = [];
  private head = 0;
  private waiter: ((r: IteratorResult<StreamResponse>) => void) | undefined;
  /** The final item was pushed. */
  private ended = false;
  /** The caller stopped iterating. */
  private abandoned = false;

  constructor(
    /** Turns a backend response into the client's view (outputs in order, reshapes, classification). */
    private readonly shape: ((response: BackendResponse) => InferResponse) | undefined,
    /** Called once, when the final item is pushed. */
    private readonly onEnd: (() => void) | undefined,
  ) {}

  /** Whether the final response went out (later sends are ignored). */
  get isEnded(): boolean {
    return this.ended;
  }

  send(response: BackendResponse | undefined, final: boolean): void {
    if (this.ended) return;
    let item: Item;
    if (response === undefined) item = new Item(undefined, undefined, final);
    else if (response.error !== undefined) item = new Item(undefined, response.error, final);
    else {
      try {
        item = new Item(this.shape!(response), undefined, final);
      } catch (err) {
        item = new Item(undefined, asNereidError(err), final);
      }
    }
    this.push(item);
  }

  /** A shaped response (non-decoupled models, cache hits). */
  deliver(response: InferResponse, final = true): void {
    if (!this.ended) this.push(new Item(response, undefined, final));
  }

  /** Ends the stream with an error, unless it already ended. */
  fail(error: NereidError): void {
    if (!this.ended) this.push(new Item(undefined, error, true));
  }

  private push(item: Item): void {
    if (item.final) {
      this.ended = true;
      this.onEnd?.();
    }
    if (this.abandoned) return;
    const w = this.waiter;
    if (w !== undefined) {
      this.waiter = undefined;
      w({ done: false, value: item });
      return;
    }
    this.queue.push(item);
  }

  next(): Promise<IteratorResult<StreamResponse>> {
    if (this.head < this.queue.length) {
      const item = this.queue[this.head]!;
      this.queue[this.head++] = undefined as unknown as Item;
      if (this.head === this.queue.length) {
        this.queue.length = 0;
        this.head = 0;
      }
      return Promise.resolve({ done: false, value: item });
    }
    if (this.ended || this.abandoned) return Promise.resolve(DONE);
    return new Promise((resolve) => (this.waiter = resolve));
  }

  /** The caller stops early (break out of for-await): what is queued or still comes is dropped. */
  return(): Promise<IteratorResult<StreamResponse>> {
    this.abandoned = true;
    this.queue.length = 0;
    this.head = 0;
    const w = this.waiter;
    this.waiter = undefined;
    w?.(DONE);
    return Promise.resolve(DONE);
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<StreamResponse> {
    return this;
  }
}

/** The responses of `request` from `server`: its inferStream(), or one infer() where it has none. */
export function streamResponses(
  server: {
    infer(r: InferRequest): Promise<InferResponse>;
    inferStream?(r: InferRequest): AsyncIterable<StreamResponse>;
  },
  request: InferRequest,
): AsyncIterable<StreamResponse> {
  if (server.inferStream !== undefined) return server.inferStream(request);
  const single = new ResponseStream(undefined, undefined);
  server.infer(request).then(
    (r) => single.deliver(r),
    (err: unknown) => single.fail(asNereidError(err)),
  );
  return single;
}
