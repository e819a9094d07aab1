/**
 * The isolate's view of the backends: requests in flight per endpoint and per class, passive
 * outlier ejection from real traffic, and the shared health snapshot (active probes, ejections
 * seen by other isolates, recovery times). Every admission decision is made here, from memory:
 * the hot path never waits on a remote call.
 */
import { PRIORITY_CLASSES, userShare, type GatewayConfig, type PriorityClass } from "../../protocol/gateway.js";
import type { ResolvedEndpoint, ResolvedPool } from "./config.js";
import { BackgroundGate } from "./yield.js";

export interface EndpointHealth {
  /** Routable per the health object: probes pass and no isolate's ejection is in force. */
  healthy: boolean;
  /** When it last became routable (ms since epoch); 0 when it never was down. */
  since: number;
}

export interface HealthSnapshot {
  endpoints: Record<string, EndpointHealth>;
  /** Per pool: when its last total outage ended, while that is recent enough to matter. */
  pools: Record<string, { down: boolean; outageEndedAt: number | null }>;
}

export interface Location {
  latitude: number;
  longitude: number;
}

/** Great-circle distance in km. */
export function distanceKm(a: Location, b: Location): number {
  const rad = Math.PI / 180;
  const dLat = (b.latitude - a.latitude) * rad;
  const dLon = (b.longitude - a.longitude) * rad;
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.latitude * rad) * Math.cos(b.latitude * rad) * Math.sin(dLon / 2) ** 2;
  return 12_742 * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** Share of capacity an endpoint routable again since `since` may use: from a tenth to all over `windowMs`. */
export function slowStartShare(since: number, windowMs: number, now: number): number {
  if (windowMs === 0 || since === 0) return 1;
  return Math.min(1, Math.max(MIN_SLOW_START, (now - since) / windowMs));
}

/** How far a pool's recovery ramp has come since its outage ended, from 0 to 1; 1 when none is in progress. */
export function rampProgress(outageEndedAt: number | null | undefined, rampMs: number, now: number): number {
  if (!outageEndedAt || rampMs === 0) return 1;
  return Math.min(1, Math.max(0, (now - outageEndedAt) / rampMs));
}

class EndpointState {
  inflight = 0;
  failures = 0;
  ejections = 0;
  ejectedUntil = 0;
  ejectedAt = 0;
  /** When a local ejection last ended, for slow start. */
  recoveredAt = 0;
  /** Back from an ejection and not yet proven: one request at a time, and one failure ejects again. */
  probation = false;
  /** The backend said it is full (429/503): send it nothing new until then. */
  fullUntil = 0;
}

const MAX_EJECTION_MS = 300_000;
/** The retry budget remembers about this long of traffic. */
const RETRY_WINDOW_MS = 10_000;
/** How long a backend that said it is full gets no new requests from this isolate. */
const FULL_BACKOFF_MS = 1_000;
const MIN_SLOW_START = 0.1;

export type Admission =
  | { ok: true; capacityShare: number }
  | { ok: false; reason: "class_budget" | "pool_down" | "ramp" | "no_capacity"; retryAfterSeconds: number };

/** How often a request waiting for a slot looks for one freed. */
const SLOT_POLL_MS = 5;

export class Balancer {
  readonly endpoints = new Map<string, EndpointState>();
  readonly classInflight: Record<PriorityClass, number> = { tab: 0, chat: 0, apply: 0, background: 0 };
  readonly poolInflight = new Map<string, number>();
  private readonly retryBudgets = new Map<string, { tokens: number; recent: number; at: number }>();
  snapshot: HealthSnapshot | null = null;
  snapshotAt = 0;
  /** Slots released in this isolate so far: a waiting request sees one freed by comparing. */
  private releases = 0;
  /** Where background requests wait for room on the isolate's thread. */
  readonly backgroundGate: BackgroundGate;

  constructor(readonly config: GatewayConfig) {
    this.backgroundGate = new BackgroundGate(config.backgroundYield);
  }

  private state(id: string): EndpointState {
    let state = this.endpoints.get(id);
    if (!state) this.endpoints.set(id, (state = new EndpointState()));
    return state;
  }

  /** Routable now: healthy in the shared snapshot and not ejected by this isolate. */
  routable(endpoint: ResolvedEndpoint, now: number): boolean {
    const shared = this.snapshot?.endpoints[endpoint.id];
    if (shared && !shared.healthy) return false;
    const local = this.endpoints.get(endpoint.id);
    if (local && local.ejectedUntil > now) {
      // The probes saw it come back after this isolate ejected it: the outage is over.
      if (!shared || shared.since <= local.ejectedAt) return false;
      local.ejectedUntil = 0;
      local.recoveredAt = shared.since;
    }
    return true;
  }

  /** Share of capacity a recovering endpoint may use: from a tenth to all over `slowStartMs`. */
  slowStart(endpoint: ResolvedEndpoint, pool: ResolvedPool, now: number): number {
    const since = Math.max(
      this.snapshot?.endpoints[endpoint.id]?.since ?? 0,
      this.endpoints.get(endpoint.id)?.recoveredAt ?? 0,
    );
    return slowStartShare(since, pool.recovery.slowStartMs, now);
  }

  /** How many requests of a class this isolate may have in flight on an endpoint now. */
  limit(endpoint: ResolvedEndpoint, pool: ResolvedPool, cls: PriorityClass, now: number): number {
    const outranked = PRIORITY_CLASSES.indexOf(cls) > PRIORITY_CLASSES.indexOf(endpoint.topClass);
    const share = outranked ? this.config.classes[cls].share : 1;
    const raw = Math.floor(endpoint.capacity * this.slowStart(endpoint, pool, now) * share);
    const limit = cls === "tab" ? Math.max(1, raw) : raw;
    return this.endpoints.get(endpoint.id)?.probation ? Math.min(1, limit) : limit;
  }

  /**
   * Routable endpoints of a pool in the order they should be tried: nearest region first, and
   * within a region the least loaded relative to its weight.
   */
  candidates(pool: ResolvedPool, from: Location, now: number) {
    const list: { endpoint: ResolvedEndpoint; km: number; load: number }[] = [];
    for (const endpoint of pool.endpoints) {
      if (!this.routable(endpoint, now)) continue;
      const km = Math.round(distanceKm(from, endpoint) / 100); // 100 km bands: same metro, same region
      const load = (this.endpoints.get(endpoint.id)?.inflight ?? 0) / endpoint.capacity / endpoint.weight;
      list.push({ endpoint, km, load });
    }
    list.sort((a, b) => a.km - b.km || a.load - b.load || a.endpoint.id.localeCompare(b.endpoint.id));
    return list.map((c) => c.endpoint);
  }

  /** Whether the pool's recovery ramp admits this caller now; paid tiers first. */
  admitRamp(pool: ResolvedPool, userId: string, paid: boolean, now: number): Admission {
    const state = this.snapshot?.pools[pool.name];
    if (state?.down)
      return {
        ok: false,
        reason: "pool_down",
        retryAfterSeconds: Math.ceil(this.config.health.probeIntervalMs / 1000),
      };
    const progress = rampProgress(state?.outageEndedAt, pool.recovery.rampMs, now);
    if (progress >= 1) return { ok: true, capacityShare: 1 };
    // Paid tiers first: the share of users admitted also bounds the capacity they may take, so the
    // slow-start slots go to paid requests before free ones.
    if (paid) return { ok: true, capacityShare: 1 };
    if (userShare(userId) < progress) return { ok: true, capacityShare: progress };
    const rest = (1 - progress) * pool.recovery.rampMs;
    return { ok: false, reason: "ramp", retryAfterSeconds: Math.max(1, Math.ceil(rest / 1000)) };
  }

  /** Takes a class slot; false when the class's concurrency budget in this isolate is spent. */
  enterClass(cls: PriorityClass): boolean {
    if (this.classInflight[cls] >= this.config.classes[cls].concurrency) return false;
    this.classInflight[cls]++;
    return true;
  }

  leaveClass(cls: PriorityClass): void {
    this.classInflight[cls]--;
  }

  /** Takes a slot on the first candidate with room for this class, spilling to farther regions. */
  acquire(
    pool: ResolvedPool,
    candidates: ResolvedEndpoint[],
    cls: PriorityClass,
    now: number,
    exclude: ReadonlySet<string> = new Set(),
    preferOtherRegionThan?: string,
    capacityShare = 1,
  ): ResolvedEndpoint | undefined {
    const ordered = preferOtherRegionThan ? candidates.filter((e) => e.region !== preferOtherRegionThan) : candidates;
    for (const endpoint of ordered) {
      if (exclude.has(endpoint.id)) continue;
      const state = this.state(endpoint.id);
      if (state.fullUntil > now) continue;
      const limit = this.limit(endpoint, pool, cls, now);
      if (state.inflight >= (capacityShare < 1 ? Math.floor(limit * capacityShare) : limit)) continue;
      state.inflight++;
      this.poolInflight.set(pool.name, (this.poolInflight.get(pool.name) ?? 0) + 1);
      return endpoint;
    }
    return undefined;
  }

  release(pool: ResolvedPool, endpoint: ResolvedEndpoint): void {
    this.state(endpoint.id).inflight--;
    this.poolInflight.set(pool.name, (this.poolInflight.get(pool.name) ?? 1) - 1);
    this.releases++;
  }

  /**
   * Waits until some endpoint slot is released, or `ms` pass; true when a release came. The waiting
   * request looks for a release on its own timer rather than being woken by the request that
   * released: a promise settled from another request's context does not count as the waiting
   * request's own I/O, and the runtime may cancel it as hung meanwhile.
   */
  waitForSlot(ms: number, signal?: AbortSignal): Promise<boolean> {
    const seen = this.releases;
    const deadline = Date.now() + ms;
    return new Promise((resolve) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const done = (released: boolean) => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(released);
      };
      const onAbort = () => done(false);
      const check = () => {
        if (this.releases !== seen) return done(true);
        const left = deadline - Date.now();
        if (left <= 0) return done(false);
        timer = setTimeout(check, Math.min(SLOT_POLL_MS, left));
      };
      if (signal?.aborted) return done(false);
      signal?.addEventListener("abort", onAbort, { once: true });
      timer = setTimeout(check, Math.min(SLOT_POLL_MS, ms));
    });
  }

  /**
   * The retry budget, a token bucket per pool: every first attempt earns `budgetRatio` of a retry
   * (failover, hedge or resume) and every retry spends one. The bucket holds `budgetRatio` of the
   * last ~10 s of requests (at least `minRetries`), so a region failing under steady traffic can
   * fail over all its requests in flight, while a retry storm cannot multiply the load.
   */
  earnRetry(pool: ResolvedPool, now = Date.now()): void {
    const budget = this.retryBudget(pool, now);
    budget.recent += 1;
    const cap = Math.max(pool.retries.minRetries, pool.retries.budgetRatio * budget.recent);
    budget.tokens = Math.min(cap, budget.tokens + pool.retries.budgetRatio);
  }

  takeRetry(pool: ResolvedPool, now = Date.now()): boolean {
    const budget = this.retryBudget(pool, now);
    if (budget.tokens < 1) return false;
    budget.tokens -= 1;
    return true;
  }

  private retryBudget(pool: ResolvedPool, now: number) {
    let budget = this.retryBudgets.get(pool.name);
    if (!budget) this.retryBudgets.set(pool.name, (budget = { tokens: pool.retries.minRetries, recent: 0, at: now }));
    budget.recent *= Math.exp(-Math.max(0, now - budget.at) / RETRY_WINDOW_MS);
    budget.at = now;
    return budget;
  }

  /** Share of its limit for this class that an endpoint has in flight in this isolate. */
  load(endpoint: ResolvedEndpoint, pool: ResolvedPool, cls: PriorityClass, now: number): number {
    return (this.endpoints.get(endpoint.id)?.inflight ?? 0) / Math.max(1, this.limit(endpoint, pool, cls, now));
  }

  /** The backend answered 429 or 503: it is full, not broken. Spill elsewhere for a moment. */
  full(endpoint: ResolvedEndpoint, now: number): void {
    this.state(endpoint.id).fullUntil = now + FULL_BACKOFF_MS;
  }

  succeeded(endpoint: ResolvedEndpoint): void {
    const state = this.state(endpoint.id);
    state.failures = 0;
    state.ejections = 0;
    state.probation = false;
  }

  /**
   * Counts a failure from real traffic; returns the ejection's end when this one ejects it. Real
   * traffic never ejects the last routable endpoint of a pool (`peers`): with nowhere else to go,
   * a busy isolate's late timers must not turn a slow backend into a total outage. Only the active
   * probes can take a whole pool down.
   */
  failed(endpoint: ResolvedEndpoint, now: number, peers: ResolvedEndpoint[] = []): number | undefined {
    const state = this.state(endpoint.id);
    state.failures++;
    if (state.ejectedUntil > now) return undefined;
    if (!peers.some((peer) => peer.id !== endpoint.id && this.routable(peer, now))) return undefined;
    if (!state.probation && state.failures < this.config.health.ejectAfterFailures) return undefined;
    const ms = Math.min(MAX_EJECTION_MS, this.config.health.ejectionMs * 2 ** state.ejections);
    state.ejections++;
    state.failures = 0;
    state.ejectedUntil = now + ms;
    state.ejectedAt = now;
    state.recoveredAt = state.ejectedUntil;
    state.probation = true;
    return state.ejectedUntil;
  }
}
