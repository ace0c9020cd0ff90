/**
 * Load drivers. Concurrency (closed loop): N call slots, each sending its
 * next request as soon as the previous one completes. Request rate (open
 * loop): requests issued on a constant or Poisson schedule whether or not
 * earlier ones have finished. Both record completions into the current
 * measurement window and stop at the first failed request.
 */
import type { Clock } from './clock.js';
import type { LoadDriver } from './profiler.js';
import { WindowRecorder } from './window.js';
import type { CallSink, InferCall, InferTransport } from './transport.js';
import type { RequestDistribution } from './options.js';

abstract class BaseDriver implements LoadDriver, CallSink {
  protected window = new WindowRecorder();
  protected sent = 0;
  protected inFlight = 0;
  protected stopping = false;
  protected firstFailure: Error | undefined;
  private warmupLeft = 0;
  private warmupDone: (() => void) | undefined;
  private drained: (() => void) | undefined;

  constructor(
    protected readonly transport: InferTransport,
    protected readonly clock: Clock,
    /** Prepared bodies consumed per request (the batch size). */
    protected readonly stepsPerRequest: number,
  ) {}

  abstract startLevel(level: number, warmupRequests: number): Promise<void>;

  protected waitWarmup(count: number): Promise<void> {
    if (count <= 0) return Promise.resolve();
    this.warmupLeft = count;
    return new Promise((resolve) => (this.warmupDone = resolve));
  }

  takeWindow(): WindowRecorder {
    const w = this.window;
    this.window = new WindowRecorder(Math.max(1024, w.count));
    return w;
  }

  currentWindowCount(): number {
    return this.window.count;
  }

  takeSentCount(): number {
    const n = this.sent;
    this.sent = 0;
    return n;
  }

  failure(): Error | undefined {
    return this.firstFailure;
  }

  /** Ends the run from outside (Ctrl-C): the profiler sees it as a failure and finished levels are reported. */
  abort(reason: Error): void {
    if (!this.firstFailure) this.firstFailure = reason;
  }

  protected issue(call: InferCall): void {
    call.bodyIndex = (call.bodyIndex + this.stepsPerRequest) % this.transport.bodyCount;
    this.inFlight++;
    this.sent++;
    this.transport.send(call);
  }

  callDone(call: InferCall, endNs: number): void {
    this.inFlight--;
    if (this.warmupLeft > 0) {
      if (--this.warmupLeft === 0) this.warmupDone?.();
    } else {
      const send = call.sentNs > 0 ? call.sentNs - call.startNs : 0;
      const receive = call.responseStartNs > 0 ? endNs - call.responseStartNs : 0;
      this.window.record(call.startNs, endNs, send, receive, call.delayed);
    }
    this.afterCall(call);
  }

  callFailed(call: InferCall, error: Error): void {
    this.inFlight--;
    if (!this.firstFailure && !this.stopping) this.firstFailure = error;
    if (this.warmupLeft > 0) {
      this.warmupLeft = 0;
      this.warmupDone?.();
    }
    this.afterCall(call);
  }

  /** What to do with the call object now that its request finished. */
  protected abstract afterCall(call: InferCall): void;

  protected checkDrained(): void {
    if (this.inFlight === 0) this.drained?.();
  }

  /** Stops issuing and waits (at most `timeoutMs`) for in-flight requests to finish. */
  async stop(timeoutMs = 5000): Promise<void> {
    this.stopping = true;
    this.stopTimers();
    if (this.inFlight === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.drained = resolve;
      // A server that stopped answering must not keep the tool from reporting.
      timer = setTimeout(resolve, timeoutMs);
    });
    clearTimeout(timer);
  }

  protected stopTimers(): void {}
}

/** Closed loop: `level` calls always in flight. */
export class ConcurrencyDriver extends BaseDriver {
  private readonly calls: InferCall[] = [];
  private running: boolean[] = [];
  private target = 0;

  async startLevel(level: number, warmupRequests: number): Promise<void> {
    this.target = level;
    const warm = this.waitWarmup(warmupRequests);
    for (let slot = 0; slot < level; slot++) {
      if (this.running[slot]) continue;
      let call = this.calls[slot];
      if (!call) {
        call = this.transport.createCall(this, slot);
        // Spread the slots over the input data so consecutive requests differ.
        call.bodyIndex = (slot * this.stepsPerRequest) % this.transport.bodyCount;
        this.calls[slot] = call;
      }
      this.running[slot] = true;
      this.issueFirst(call);
    }
    await warm;
  }

  private issueFirst(call: InferCall): void {
    this.inFlight++;
    this.sent++;
    this.transport.send(call);
  }

  protected afterCall(call: InferCall): void {
    if (this.stopping || this.firstFailure || call.slot >= this.target) {
      this.running[call.slot] = false;
      this.checkDrained();
      return;
    }
    this.issue(call);
  }
}

/** Open loop: requests at `level` per second, constant spacing or Poisson arrivals. */
export class RequestRateDriver extends BaseDriver {
  private readonly free: InferCall[] = [];
  private nextBody = 0;
  private rate = 0;
  private nextDueNs = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly onTimer = () => this.tick();

  constructor(
    transport: InferTransport,
    clock: Clock,
    stepsPerRequest: number,
    private readonly distribution: RequestDistribution,
    private readonly random: () => number = Math.random,
    /** A request issued later than this after its scheduled time counts as delayed. */
    private readonly delaySlackNs = 2e6,
  ) {
    super(transport, clock, stepsPerRequest);
  }

  /** Gap to the next request in ns. */
  intervalNs(): number {
    const mean = 1e9 / this.rate;
    return this.distribution === 'poisson' ? -Math.log(1 - this.random()) * mean : mean;
  }

  async startLevel(level: number, warmupRequests: number): Promise<void> {
    this.rate = level;
    const warm = this.waitWarmup(warmupRequests);
    this.nextDueNs = this.clock.nowNs();
    if (this.timer) clearTimeout(this.timer);
    this.tick();
    await warm;
  }

  private tick(): void {
    this.timer = undefined;
    if (this.stopping || this.firstFailure) return;
    const now = this.clock.nowNs();
    // Issue everything that is due (timers fire in ~1 ms steps; high rates send several per tick).
    while (this.nextDueNs <= now) {
      const call = this.free.pop() ?? this.transport.createCall(this, -1);
      call.bodyIndex = this.nextBody;
      this.nextBody = (this.nextBody + this.stepsPerRequest) % this.transport.bodyCount;
      call.delayed = now - this.nextDueNs > this.delaySlackNs;
      this.inFlight++;
      this.sent++;
      this.transport.send(call);
      this.nextDueNs += this.intervalNs();
    }
    this.timer = setTimeout(this.onTimer, Math.max(0, (this.nextDueNs - this.clock.nowNs()) / 1e6));
  }

  protected afterCall(call: InferCall): void {
    this.free.push(call);
    if (this.stopping) this.checkDrained();
  }

  protected override stopTimers(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
