/**
 * The test's own count of what each rate limit has served, against which the edge's answers are
 * judged under concurrency: a limit is named `<policy>:<identity id>` (e.g. `admin-key:key_x`).
 * Shared by the workerd and the end-to-end concurrency tests; it has no runtime of its own.
 */
export class LimitLedger {
  /** Requests (or tokens, for a tokens limit) served by each limit. */
  readonly served = new Map<string, number>();
  /** Requests sent and not yet answered, by each limit they spend. */
  readonly inflight = new Map<string, number>();
  readonly statuses = new Map<number, number>();
  readonly violations: string[] = [];
  private seed: number;

  constructor(seed: number) {
    this.seed = seed;
  }

  /** A seeded pseudo-random integer below `n`, the same every run. */
  random(n: number): number {
    this.seed = (Math.imul(this.seed ^ (this.seed >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    return this.seed % n;
  }

  private static bump<K>(map: Map<K, number>, key: K, by: number): void {
    map.set(key, (map.get(key) ?? 0) + by);
  }

  sent(limits: string[]): void {
    for (const name of limits) LimitLedger.bump(this.inflight, name, 1);
  }

  /** An answer to a request that spends `limits`; `spent` is what a served request counts against one. */
  answered(limits: string[], status: number, spent: (name: string) => number = () => 1): void {
    for (const name of limits) LimitLedger.bump(this.inflight, name, -1);
    LimitLedger.bump(this.statuses, status, 1);
    if (status === 200) for (const name of limits) LimitLedger.bump(this.served, name, spent(name));
  }

  /**
   * A 429 from a requests limit of `limit` per `windowSeconds`: it must come only once what was
   * served and is still in flight reaches the limit, say `r=0` for it, and give a `Retry-After`
   * that is `t` and no longer than one unit's refill.
   */
  refusedByRequests(
    name: string,
    limit: number,
    windowSeconds: number,
    field: string | null,
    retryAfter: string | null,
  ): void {
    const served = this.served.get(name) ?? 0;
    const inflight = this.inflight.get(name) ?? 0;
    if (served + inflight < limit)
      this.violations.push(`${name} refused with ${served} served and ${inflight} in flight of ${limit}`);
    const seconds = Number(retryAfter);
    if (!(Number.isInteger(seconds) && seconds >= 1 && seconds <= Math.ceil(windowSeconds / limit)))
      this.violations.push(`${name}: Retry-After ${retryAfter}`);
    const policy = name.slice(0, name.indexOf(":"));
    if (field !== `"${policy}";r=0;t=${seconds}`)
      this.violations.push(`${name}: RateLimit ${field} with Retry-After ${retryAfter}`);
  }

  /** Every limit served at most its limit (`limitOf`) plus `slack` (refill, or a reservation). */
  checkServed(limitOf: (name: string) => number, slack: (name: string) => number = () => 0): void {
    for (const [name, count] of this.served) {
      const limit = limitOf(name);
      if (count > limit + slack(name)) this.violations.push(`${name} served ${count} of ${limit}`);
    }
  }
}

/** Runs `total` tasks, `concurrency` at a time. */
export async function inParallel(
  total: number,
  concurrency: number,
  task: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) await task(next++);
    }),
  );
}
