/**
 * Background requests yield to interactive ones. An isolate runs its requests on one thread, so
 * background work that arrives back to back (agent turns, prefetches) can fill that thread and every
 * tab request then queues behind it, however the backends' slots are shared. While the isolate serves
 * interactive requests (a tab, chat or apply request started within `interactiveMs`), a background
 * request waits its turn here before it takes any slot: one at a time, in arrival order, each goes
 * when the isolate's timers run on time, a sign that its thread has room. How late they run is the
 * measure: a timer set for `pollMs` that fires later waited behind other work. Nothing waits past
 * `maxWaitMs`, so background work slows under load but never stops; with no interactive request
 * about, it goes at once.
 *
 * Each waiter wakes on its own timer, never on another request's promise (see
 * `Balancer.waitForSlot`): a request whose only pending I/O belonged to another may be cancelled as hung.
 */
import type { GatewayConfig } from "../../protocol/gateway.js";
import { sleep } from "../../protocol/sleep.js";

export type YieldConfig = GatewayConfig["backgroundYield"];

export interface GateClock {
  now(): number;
  /** Resolves after `ms`, or rejects when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

const realClock: GateClock = { now: () => Date.now(), sleep };

/** Waiters behind the first look for their turn this many times less often. */
const BEHIND_FACTOR = 4;
/** A lateness sample older than this says nothing about the thread now. */
const STALE_MS = 100;

export class BackgroundGate {
  /** The next ticket to hand out, and the ticket whose turn it is. */
  private issued = 0;
  private serving = 0;
  /** Tickets that left out of turn (aborted, or past `maxWaitMs`). */
  private readonly left = new Set<number>();
  /** Background requests waiting their turn now. */
  private waiting = 0;
  /** Smoothed lateness of the waiters' timers, in ms. */
  private lagMs = 0;
  private sampledAt = -Infinity;
  /** When the isolate last started an interactive request. */
  private interactiveAt = -Infinity;
  /** Requests that went at once (no interactive request about, or the gate off). */
  bypassed = 0;
  /** Requests that took their turn in line, and how many of them were held (behind another, or the thread busy). */
  admitted = 0;
  yielded = 0;

  constructor(
    private readonly config: YieldConfig,
    private readonly clock: GateClock = realClock,
  ) {}

  /** A tab, chat or apply request starts in this isolate. */
  interactive(now: number): void {
    this.interactiveAt = now;
  }

  private quiet(now: number): boolean {
    return now - this.interactiveAt > this.config.interactiveMs;
  }

  /** What `GET /admin/gateway` shows of this isolate's gate. */
  status(now: number) {
    return {
      interactive: !this.quiet(now),
      lagMs: Math.round(this.lagMs * 100) / 100,
      waiting: this.waiting,
      bypassed: this.bypassed,
      admitted: this.admitted,
      yielded: this.yielded,
    };
  }

  /**
   * Waits for this request's turn and room on the thread; returns how long it waited (ms). Rejects
   * with the signal's reason when it aborts first. A disabled gate (`lagMs` 0), or one with no
   * interactive request about and nobody waiting, admits at once.
   */
  async admit(signal?: AbortSignal): Promise<number> {
    const { lagMs, pollMs, maxWaitMs } = this.config;
    const start = this.clock.now();
    if (lagMs === 0 || (this.quiet(start) && this.waiting === 0)) {
      this.bypassed++;
      return 0;
    }
    const ticket = this.issued++;
    this.waiting++;
    let waited = false;
    for (let round = 0; ; round++) {
      const head = this.head() === ticket;
      const interval = head ? pollMs : pollMs * BEHIND_FACTOR;
      const before = this.clock.now();
      try {
        await this.clock.sleep(interval, signal);
      } catch (err) {
        this.waiting--;
        this.leave(ticket);
        throw err;
      }
      const now = this.clock.now();
      // The runtime's clock stands still while code runs, so the first timer's lateness would count
      // this request's own work before it came here (reading and checking its body): not a sample.
      if (round > 0) this.sample(Math.max(0, now - before - interval), now);
      if (now - start >= maxWaitMs || this.quiet(now)) {
        this.leave(ticket);
        break;
      }
      const fresh = now - this.sampledAt <= STALE_MS;
      if (this.head() === ticket && fresh && this.lagMs <= lagMs) {
        this.serving = ticket + 1;
        this.head();
        break;
      }
      // Held: behind another, or the thread busy (not merely no sample yet).
      if (this.head() !== ticket || (fresh && this.lagMs > lagMs)) waited = true;
    }
    this.waiting--;
    this.admitted++;
    if (waited) this.yielded++;
    return this.clock.now() - start;
  }

  private sample(late: number, now: number): void {
    this.lagMs = now - this.sampledAt > STALE_MS ? late : (this.lagMs + late) / 2;
    this.sampledAt = now;
  }

  /** The ticket whose turn it is, past any that left out of turn. */
  private head(): number {
    while (this.left.delete(this.serving)) this.serving++;
    return this.serving;
  }

  private leave(ticket: number): void {
    if (ticket === this.serving) {
      this.serving++;
      this.head();
    } else if (ticket > this.serving) this.left.add(ticket);
  }
}
