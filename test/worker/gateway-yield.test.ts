import { describe, expect, it } from "vitest";
import { GatewayConfig } from "../../protocol/gateway.js";
import { BackgroundGate, type GateClock, type YieldConfig } from "../../workers/gateway/yield.js";

/**
 * A clock whose timers fire only when the test says, each `late` ms after it was due: how late an
 * isolate's timers run is all the gate knows of how busy the thread is.
 */
class StepClock implements GateClock {
  t = 0;
  late = 0;
  private timers: { at: number; fire: () => void }[] = [];

  now() {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal) {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const timer = { at: this.t + ms, fire: resolve };
      this.timers.push(timer);
      signal?.addEventListener("abort", () => {
        this.timers = this.timers.filter((t) => t !== timer);
        reject(signal.reason);
      });
    });
  }

  get pending() {
    return this.timers.length;
  }

  /** Fires the next timer due, late by `late`, and lets its waiter run. */
  async step() {
    this.timers.sort((a, b) => a.at - b.at);
    const next = this.timers.shift();
    if (!next) throw new Error("no timer pending");
    this.t = Math.max(this.t, next.at + this.late);
    next.fire();
    for (let i = 0; i < 10; i++) await Promise.resolve();
  }

  async steps(n: number) {
    for (let i = 0; i < n; i++) await this.step();
  }
}

const CONFIG: YieldConfig = { lagMs: 2, pollMs: 2, maxWaitMs: 1_000, interactiveMs: 1_000_000 };

/** A gate in an isolate that has just started an interactive request. */
function gate(config: Partial<YieldConfig> = {}) {
  const clock = new StepClock();
  const g = new BackgroundGate({ ...CONFIG, ...config }, clock);
  g.interactive(0);
  return { clock, gate: g };
}

/** Starts `admit` and records when it settles. */
function track(g: BackgroundGate, order: number[], n: number, signal?: AbortSignal) {
  const state = { done: false, waited: -1, error: undefined as unknown };
  g.admit(signal).then(
    (ms) => {
      state.done = true;
      state.waited = ms;
      order.push(n);
    },
    (err: unknown) => {
      state.done = true;
      state.error = err;
    },
  );
  return state;
}

describe("background yield", () => {
  it("is on by default, and validated as configuration", () => {
    const config = GatewayConfig.parse({ pools: {} });
    expect(config.backgroundYield).toEqual({ lagMs: 0.25, pollMs: 2, maxWaitMs: 2_000, interactiveMs: 1_000 });
    expect(() => GatewayConfig.parse({ pools: {}, backgroundYield: { lagMs: -1 } })).toThrow();
    expect(() => GatewayConfig.parse({ pools: {}, backgroundYield: { pollMs: 0 } })).toThrow();
    expect(() => GatewayConfig.parse({ pools: {}, backgroundYield: { wait: 1 } })).toThrow();
  });

  it("turned off (lagMs 0), admits at once without a timer", async () => {
    const { clock, gate: g } = gate({ lagMs: 0 });
    expect(await g.admit()).toBe(0);
    expect(clock.pending).toBe(0);
    expect(g.status(0)).toMatchObject({ bypassed: 1, admitted: 0 });
  });

  it("with no interactive request about, admits at once without a timer", async () => {
    const clock = new StepClock();
    const g = new BackgroundGate({ ...CONFIG, interactiveMs: 1_000 }, clock);
    expect(await g.admit()).toBe(0);
    g.interactive(0);
    clock.t = 1_001;
    expect(await g.admit()).toBe(0);
    expect(clock.pending).toBe(0);
    expect(g.status(clock.t)).toEqual({
      interactive: false,
      lagMs: 0,
      waiting: 0,
      bypassed: 2,
      admitted: 0,
      yielded: 0,
    });
  });

  it("lets its waiters go once interactive requests stop, however busy the thread", async () => {
    const { clock, gate: g } = gate({ interactiveMs: 100 });
    const order: number[] = [];
    clock.late = 20;
    const states = [0, 1, 2].map((n) => track(g, order, n));
    await clock.steps(2);
    expect(states.some((s) => s.done)).toBe(false);
    while (states.some((s) => !s.done)) await clock.step();
    expect(clock.t).toBeGreaterThan(100);
    expect(clock.t).toBeLessThan(100 + 3 * (CONFIG.pollMs * 4 + 20));
    expect(order).toHaveLength(3);
    expect(g.status(clock.t).waiting).toBe(0);
  });

  it("on an idle thread, admits after two on-time timers, and the next at once after one", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    const a = track(g, order, 0);
    await clock.step();
    // The first timer's lateness is the request's own work: no sample yet.
    expect(a.done).toBe(false);
    await clock.step();
    expect(a).toMatchObject({ done: true, waited: 4 });
    const b = track(g, order, 1);
    await clock.step();
    expect(b).toMatchObject({ done: true, waited: 2 });
    expect([g.admitted, g.yielded]).toEqual([2, 0]);
  });

  it("does not count the first timer's lateness, which holds the request's own work", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    clock.late = 50;
    const a = track(g, order, 0);
    await clock.step();
    clock.late = 0;
    await clock.step();
    expect(a.done).toBe(true);
    expect(g.status(clock.t).lagMs).toBe(0);
  });

  it("holds a request while timers run late and lets it go when they are on time again", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    clock.late = 20;
    const a = track(g, order, 0);
    await clock.steps(10);
    expect(a.done).toBe(false);
    expect(g.status(clock.t).lagMs).toBeGreaterThan(CONFIG.lagMs);
    expect(g.status(clock.t).waiting).toBe(1);
    clock.late = 0;
    // The smoothed lateness halves with each on-time timer: 20 → 10 → 5 → 2.5 → 1.25.
    await clock.steps(3);
    expect(a.done).toBe(false);
    await clock.step();
    expect(a.done).toBe(true);
    expect(g.status(clock.t)).toMatchObject({ admitted: 1, yielded: 1, waiting: 0 });
  });

  it("admits in arrival order, one per timer of the request at the head", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    const states = [0, 1, 2, 3].map((n) => track(g, order, n));
    while (states.some((s) => !s.done)) await clock.step();
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it("never holds a request past maxWaitMs, however late the timers run", async () => {
    const { clock, gate: g } = gate({ maxWaitMs: 100 });
    const order: number[] = [];
    clock.late = 30;
    const a = track(g, order, 0);
    await clock.steps(2);
    const b = track(g, order, 1);
    while (!a.done) await clock.step();
    expect(a.waited).toBeGreaterThanOrEqual(100);
    expect(a.waited).toBeLessThan(100 + 2 * (CONFIG.pollMs * 4 + 30));
    expect(b.done).toBe(false);
    while (!b.done) await clock.step();
    expect(b.waited).toBeGreaterThanOrEqual(100);
    expect(order).toEqual([0, 1]);
    expect(g.status(clock.t)).toMatchObject({ waiting: 0, yielded: 2 });
  });

  it("an aborted request leaves the line and the next one goes", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    clock.late = 20;
    const controller = new AbortController();
    const a = track(g, order, 0, controller.signal);
    const b = track(g, order, 1);
    await clock.steps(4);
    controller.abort(new Error("client went away"));
    await Promise.resolve();
    await Promise.resolve();
    expect(a.done).toBe(true);
    expect(String(a.error)).toContain("client went away");
    expect(g.status(clock.t).waiting).toBe(1);
    clock.late = 0;
    while (!b.done) await clock.step();
    expect(order).toEqual([1]);
    expect(g.admitted).toBe(1);
  });

  it("an abort behind the head does not stall the line", async () => {
    const { clock, gate: g } = gate();
    const order: number[] = [];
    const controller = new AbortController();
    const a = track(g, order, 0);
    const b = track(g, order, 1, controller.signal);
    const c = track(g, order, 2);
    const gone = new Error("gone");
    controller.abort(gone);
    while (!a.done || !c.done) await clock.step();
    expect(b.error).toBe(gone);
    expect(order).toEqual([0, 2]);
    expect(g.status(clock.t).waiting).toBe(0);
  });
});
