/**
 * The main-thread side of one session thread: starts the worker, owns its
 * control ring, and routes what the worker answers to the sessions on it
 * (SessionClient, one per instance). A thread holds one session or several
 * (see session-pool.ts); every ring entry and message names its session.
 *
 * When the thread dies (an uncaught error, an exit, or the pool's watchdog
 * stopping a stalled one) every session on it fails its runs in flight and
 * the thread's owner is told which sessions they were (onDeath).
 */
import { MessageChannel, type MessagePort, Worker, receiveMessageOnPort } from 'node:worker_threads';
import type { InferenceSession } from 'onnxruntime-node';
import type { SessionClient } from './session-client.js';
import {
  CONTROL_WORDS,
  C_ABANDONED,
  C_DONE,
  C_LIGHT,
  C_RUNNING,
  C_SENT,
  C_STATE,
  C_TAIL,
  MAX_SESSIONS,
  RING_BASE,
  RING_CONTROL,
  RING_MASK,
  RING_SIZE,
  STATE_DOZING,
  STATE_SLEEPING,
  STATE_AWAKE,
  WAKE,
  entryArena,
  entrySession,
  type FromWorker,
  type SessionWorkerInit,
  type ToWorker,
} from './worker-protocol.js';

const WORKER_URL = new URL('./session-worker.js', import.meta.url);

/** How long exit() waits for the worker to release its sessions before terminating it. */
const EXIT_GRACE_MS = 5000;

export class SessionWorkerError extends Error {
  override readonly name = 'SessionWorkerError';
}

interface PendingOpen {
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
}

let nextThreadNumber = 1;

export class SessionThread {
  /** A number for log records. */
  readonly number = nextThreadNumber++;
  readonly control: Int32Array;
  /** Sessions on this thread (opened, or being opened), by slot. */
  readonly clients = new Map<number, SessionClient>();
  /** Set by the owner: the thread died with sessions on it (not called after exit()). */
  onDeath: ((err: Error, clients: readonly SessionClient[]) => void) | undefined;
  /** Set by the owner: the last session on the thread was released (or failed to open). */
  onEmpty: (() => void) | undefined;
  private readonly worker: Worker;
  /** The worker's answers (see SessionWorkerInit.answers). */
  private readonly answers: MessagePort;
  /** C_DONE when collectFinished last took the answers in. */
  private collectedAt = 0;
  /** Ring entries appended so far. */
  private tail = 0;
  /** Counted messages sent so far (see C_SENT). */
  private sent = 0;
  private notifyQueued = false;
  /** Ring entries not finished yet (at most RING_SIZE). */
  private ringed = 0;
  /** Entries waiting for a free ring slot, in order. */
  private readonly backlog: number[] = [];
  /** Runs and control work in flight, over every session. */
  private inFlight = 0;
  private readonly freeSlots: number[] = [];
  private nextSlot = 0;
  private readonly opening = new Map<number, PendingOpen>();
  private readonly releasing = new Map<number, () => void>();
  private dead: Error | undefined;
  private exiting = false;
  private readonly exited: Promise<void>;
  /** Watchdog state: C_DONE when last seen, and when it last moved (or the thread was last idle). */
  private seenDone = 0;
  private progressAt = performance.now();

  constructor(readonly spinMicros: number) {
    const control = new SharedArrayBuffer(CONTROL_WORDS * 4);
    this.control = new Int32Array(control);
    const { port1, port2 } = new MessageChannel();
    const init: SessionWorkerInit = { control, spinMicros, answers: port2 };
    this.worker = new Worker(WORKER_URL, { workerData: init, transferList: [port2] });
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
    this.answers = port1;
    port1.on('message', (msg: FromWorker) => this.onMessage(msg));
    // The worker's own handle keeps the process alive while work is in flight (beginWork); the port never does.
    port1.unref();
    this.worker.on('error', (err) =>
      this.fail(new SessionWorkerError(`onnxruntime session thread failed: ${err.message}`)),
    );
    this.worker.on('exit', (code) =>
      this.fail(new SessionWorkerError(`onnxruntime session thread exited (code ${code})`)),
    );
    // Idle threads do not keep the process alive; work in flight does.
    this.worker.unref();
  }

  /** Nothing handed to the thread, by any of its sessions, is unfinished. */
  get idle(): boolean {
    return this.inFlight === 0;
  }

  get alive(): boolean {
    return this.dead === undefined && !this.exiting;
  }

  /** The worker sleeps (not busy, busy-waiting or dozing): the next run must post it a wake-up. */
  get asleep(): boolean {
    return Atomics.load(this.control, C_STATE) === STATE_SLEEPING;
  }

  /** The error the thread died of, if it did. */
  get deathError(): Error | undefined {
    return this.dead;
  }

  /** Creates `client`'s session on this thread; rejects with onnxruntime's message when it cannot. */
  open(client: SessionClient, modelPath: string, options: InferenceSession.SessionOptions): Promise<number> {
    if (!this.alive)
      return Promise.reject(this.dead ?? new SessionWorkerError('onnxruntime session thread is closing'));
    const slot = this.freeSlots.pop() ?? this.nextSlot++;
    if (slot >= MAX_SESSIONS)
      return Promise.reject(
        new SessionWorkerError(`an onnxruntime session thread holds at most ${MAX_SESSIONS} sessions`),
      );
    this.clients.set(slot, client);
    return new Promise<number>((resolve, reject) => {
      this.opening.set(slot, { resolve: () => resolve(slot), reject });
      this.beginWork();
      this.postCounted({ kind: 'open', session: slot, modelPath, options });
      this.append(RING_CONTROL);
    });
  }

  /** Releases the session in `slot` (its runs have finished). */
  release(slot: number): Promise<void> {
    if (!this.clients.has(slot) || this.dead) {
      this.clients.delete(slot);
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.releasing.set(slot, resolve);
      this.beginWork();
      this.postCounted({ kind: 'release', session: slot });
      this.append(RING_CONTROL);
    });
  }

  /** Ends the thread once the work already handed over is done. */
  async exit(): Promise<void> {
    if (this.dead || this.exiting) return this.exited;
    this.exiting = true;
    this.worker.ref();
    this.postCounted({ kind: 'exit' });
    this.append(RING_CONTROL);
    const timer = setTimeout(() => void this.worker.terminate(), EXIT_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }

  /**
   * Gives the thread up (a stalled run): its sessions fail at once and
   * onDeath is told. The worker ends by itself once the entry it runs
   * returns; terminating it while onnxruntime runs would abort the process.
   */
  abandon(reason: string): void {
    if (this.dead || this.exiting) return;
    Atomics.store(this.control, C_ABANDONED, 1);
    Atomics.notify(this.control, C_TAIL);
    this.worker.postMessage(WAKE);
    this.fail(new SessionWorkerError(reason));
  }

  /**
   * Takes in, now, what the worker answered for entries it has finished but
   * whose messages the event loop has not reached yet (they go through the
   * same handling, so the runs' promises settle in the microtasks after the
   * caller's task). Cheap when nothing finished: one atomic read. For a
   * flooded event loop: while it refuses thousands of requests in one turn,
   * a finished batch would otherwise wait for the end of that turn to be
   * answered, its instance with it to be given the next.
   */
  collectFinished(): void {
    const done = Atomics.load(this.control, C_DONE);
    if (done === this.collectedAt || this.dead !== undefined) return;
    this.collectedAt = done;
    for (let got = receiveMessageOnPort(this.answers); got !== undefined; got = receiveMessageOnPort(this.answers)) {
      this.onMessage(got.message as FromWorker);
    }
  }

  /** Resolves when the worker has ended. */
  whenExited(): Promise<void> {
    return this.exited;
  }

  /**
   * For the watchdog: how long (ms) the thread has had work in flight
   * without finishing an entry, and the client whose entry it is running.
   */
  stalledFor(now: number): { ms: number; running: SessionClient | undefined } {
    const done = Atomics.load(this.control, C_DONE);
    if (this.inFlight === 0 || done !== this.seenDone) {
      this.seenDone = done;
      this.progressAt = now;
      return { ms: 0, running: undefined };
    }
    const running = Atomics.load(this.control, C_RUNNING);
    return { ms: now - this.progressAt, running: running > 0 ? this.clients.get(running - 1) : undefined };
  }

  /** A run is about to be handed over. */
  beginWork(): void {
    if (this.inFlight++ === 0) {
      this.worker.ref();
      // The watchdog counts from when work arrived at an idle thread.
      this.progressAt = performance.now();
    }
  }

  /** A run or a control task handed over earlier has finished. */
  finish(): void {
    this.ringed--;
    const next = this.backlog.shift();
    if (next !== undefined) this.append(next);
    if (--this.inFlight === 0) this.worker.unref();
  }

  /**
   * Appends a ring entry and wakes the worker if it dozes or sleeps (a busy
   * or busy-waiting worker needs nothing). C_LIGHT tells the worker whether
   * it may busy-wait after this run: only under light load (nothing else in
   * flight on the thread), where the run's latency is what counts and the
   * cores have room; under load, busy-waiting takes a core the event loop needs.
   */
  append(entry: number): void {
    if (this.ringed >= RING_SIZE) {
      // Every slot holds an entry not yet finished: wait for one to finish.
      this.backlog.push(entry);
      return;
    }
    this.ringed++;
    const c = this.control;
    c[RING_BASE + (this.tail & RING_MASK)] = entry;
    this.tail = (this.tail + 1) | 0;
    c[C_LIGHT] = this.inFlight <= 1 ? 1 : 0;
    Atomics.store(c, C_TAIL, this.tail);
    const state = Atomics.load(c, C_STATE);
    if (state === STATE_DOZING) {
      // One notification at the end of this event-loop turn covers every run
      // appended in it: a worker faster than the event loop would otherwise
      // doze and be notified again for each.
      if (!this.notifyQueued) {
        this.notifyQueued = true;
        setImmediate(this.notifyDozing);
      }
    } else if (state === STATE_SLEEPING) this.wakeSleeping();
  }

  /** Posts a message the worker must receive before the next ring entry. */
  postCounted(msg: ToWorker, transfer?: ArrayBuffer[]): void {
    this.worker.postMessage(msg, transfer);
    this.sent = (this.sent + 1) | 0;
    Atomics.store(this.control, C_SENT, this.sent);
  }

  private wakeSleeping(): void {
    if (Atomics.compareExchange(this.control, C_STATE, STATE_SLEEPING, STATE_AWAKE) === STATE_SLEEPING)
      this.worker.postMessage(WAKE);
  }

  /** Made once: notifies a worker that dozes (or wakes one that fell asleep meanwhile). */
  private readonly notifyDozing = (): void => {
    this.notifyQueued = false;
    const state = Atomics.load(this.control, C_STATE);
    if (state === STATE_DOZING) Atomics.notify(this.control, C_TAIL, 1);
    else if (state === STATE_SLEEPING) this.wakeSleeping();
  };

  private onMessage(msg: FromWorker): void {
    if (typeof msg === 'number') {
      this.clients.get(entrySession(msg))?.arenaDone(entryArena(msg));
      return;
    }
    switch (msg.kind) {
      case 'result':
      case 'run-error':
        this.clients.get(msg.session)?.resultArrived(msg);
        return;
      case 'opened': {
        const p = this.opening.get(msg.session);
        this.opening.delete(msg.session);
        this.finish();
        p?.resolve();
        return;
      }
      case 'open-error': {
        const p = this.opening.get(msg.session);
        this.opening.delete(msg.session);
        this.dropSlot(msg.session);
        this.finish();
        p?.reject(new SessionWorkerError(msg.message));
        this.checkEmpty();
        return;
      }
      case 'released': {
        const done = this.releasing.get(msg.session);
        this.releasing.delete(msg.session);
        this.dropSlot(msg.session);
        this.finish();
        done?.();
        this.checkEmpty();
        return;
      }
    }
  }

  private checkEmpty(): void {
    if (this.clients.size === 0 && this.alive) this.onEmpty?.();
  }

  private dropSlot(slot: number): void {
    if (this.clients.delete(slot)) this.freeSlots.push(slot);
  }

  private fail(err: Error): void {
    if (this.dead) return;
    // Answers posted before the worker ended are taken as answers (the worker's
    // own port delivered them before its exit; this one may not).
    for (let got = receiveMessageOnPort(this.answers); got !== undefined; got = receiveMessageOnPort(this.answers)) {
      this.onMessage(got.message as FromWorker);
    }
    this.answers.close();
    this.dead = err;
    const wasExiting = this.exiting;
    // Sessions still being opened fail their open instead.
    const clients = [...this.clients].filter(([slot]) => !this.opening.has(slot)).map(([, c]) => c);
    this.clients.clear();
    this.inFlight = 0;
    this.ringed = 0;
    this.backlog.length = 0;
    for (const p of this.opening.values()) p.reject(err);
    this.opening.clear();
    for (const done of this.releasing.values()) done();
    this.releasing.clear();
    for (const c of clients) c.threadDied(this, err);
    if (!wasExiting && clients.length > 0) this.onDeath?.(err, clients);
  }
}
