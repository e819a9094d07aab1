/**
 * Backend health shared by every isolate: active probes from an alarm, ejections reported by
 * isolates that saw an endpoint fail real traffic, and when each pool last came back from a total
 * outage (the recovery ramp's clock). Isolates read a snapshot in the background at most once per
 * `snapshotMaxAgeMs`; no request ever waits on this object.
 */
import { DurableObject } from "cloudflare:workers";
import type { ProbeResult } from "../protocol/gateway.js";
import type { HealthSnapshot } from "../workers/gateway/balancer.js";
import { backendHeaders, loadGateway, type Gateway } from "../workers/gateway/config.js";

interface EndpointRecord {
  /** The last probe passed (true until the first probe says otherwise). */
  probeOk: boolean;
  /** Ejected by an isolate until then. */
  ejectedUntil: number;
  /** When it last became routable; 0 when it never was down. */
  since: number;
  routable: boolean;
  /** The last probe (`at` in ms since epoch); null before the first. */
  probe: (Omit<ProbeResult, "at"> & { at: number }) | null;
}

/** What `GET /admin/gateway` reads: every record, as stored. */
export interface HealthRecords {
  endpoints: Record<string, EndpointRecord>;
  pools: Record<string, PoolRecord>;
}

interface PoolRecord {
  down: boolean;
  outageEndedAt: number | null;
}

interface State {
  fingerprint: string;
  endpoints: Record<string, EndpointRecord>;
  pools: Record<string, PoolRecord>;
}

/** Probing stops when no isolate has asked for a snapshot for this long. */
const IDLE_MS = 5 * 60_000;

export class GatewayHealth extends DurableObject<Env> {
  private state: State | undefined;
  private lastRead = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS health (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL)",
    );
  }

  private gateway(): Gateway | null {
    return loadGateway(this.env);
  }

  private load(gateway: Gateway): State {
    if (this.state?.fingerprint === gateway.fingerprint) return this.state;
    const row = this.ctx.storage.sql.exec<{ state: string }>("SELECT state FROM health WHERE id = 1").toArray()[0];
    const saved = row ? (JSON.parse(row.state) as State) : undefined;
    const state: State = { fingerprint: gateway.fingerprint, endpoints: {}, pools: {} };
    for (const id of gateway.endpoints.keys())
      state.endpoints[id] = {
        probeOk: true,
        ejectedUntil: 0,
        since: 0,
        routable: true,
        probe: null,
        ...saved?.endpoints[id],
      };
    for (const pool of gateway.pools)
      state.pools[pool.name] = saved?.pools[pool.name] ?? { down: false, outageEndedAt: null };
    this.state = state;
    return state;
  }

  private save(state: State): void {
    this.ctx.storage.sql.exec(
      "INSERT INTO health (id, state) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET state = excluded.state",
      JSON.stringify(state),
    );
  }

  /** Recomputes who is routable and which pools are down; records recoveries. */
  private settle(gateway: Gateway, state: State, now: number): boolean {
    const before = JSON.stringify(state);
    for (const record of Object.values(state.endpoints)) {
      const routable = record.probeOk && record.ejectedUntil <= now;
      if (routable && !record.routable) record.since = Math.max(now, record.ejectedUntil);
      record.routable = routable;
    }
    for (const pool of gateway.pools) {
      const record = state.pools[pool.name]!;
      const down = pool.endpoints.every((e) => !state.endpoints[e.id]!.routable);
      if (record.down && !down) record.outageEndedAt = now;
      if (record.outageEndedAt !== null && now - record.outageEndedAt > pool.recovery.rampMs)
        record.outageEndedAt = null;
      record.down = down;
    }
    return JSON.stringify(state) !== before;
  }

  private async ensureAlarm(gateway: Gateway): Promise<void> {
    if ((await this.ctx.storage.getAlarm()) === null)
      await this.ctx.storage.setAlarm(Date.now() + gateway.config.health.probeIntervalMs);
  }

  /** The state brought up to date; a read also keeps the probes running. */
  private async current(): Promise<State | null> {
    const gateway = this.gateway();
    if (!gateway) return null;
    const state = this.load(gateway);
    const now = Date.now();
    this.lastRead = now;
    if (this.settle(gateway, state, now)) this.save(state);
    await this.ensureAlarm(gateway);
    return state;
  }

  /** The current view, as isolates route by it. */
  async snapshot(): Promise<HealthSnapshot | null> {
    const state = await this.current();
    if (!state) return null;
    const endpoints: HealthSnapshot["endpoints"] = {};
    for (const [id, record] of Object.entries(state.endpoints))
      endpoints[id] = { healthy: record.routable, since: record.since };
    return { endpoints, pools: structuredClone(state.pools) };
  }

  /** Every record, for the operator's view. */
  async records(): Promise<HealthRecords | null> {
    const state = await this.current();
    return state && { endpoints: structuredClone(state.endpoints), pools: structuredClone(state.pools) };
  }

  /** An isolate ejected an endpoint after failures on real traffic: every isolate avoids it. */
  async eject(endpointId: string, until: number): Promise<void> {
    const gateway = this.gateway();
    if (!gateway) return;
    const state = this.load(gateway);
    const record = state.endpoints[endpointId];
    if (!record) return;
    record.ejectedUntil = Math.max(record.ejectedUntil, until);
    this.settle(gateway, state, Date.now());
    this.save(state);
    await this.ensureAlarm(gateway);
  }

  private async probe(
    url: string,
    timeoutMs: number,
    headers: Record<string, string>,
  ): Promise<NonNullable<EndpointRecord["probe"]>> {
    const at = Date.now();
    const started = performance.now();
    try {
      const response = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
      await response.body?.cancel();
      return { at, ok: response.ok, status: response.status, error: null, ms: performance.now() - started };
    } catch (err) {
      const timedOut = err instanceof DOMException && err.name === "TimeoutError";
      return {
        at,
        ok: false,
        status: null,
        error: timedOut ? "timeout" : "unreachable",
        ms: performance.now() - started,
      };
    }
  }

  override async alarm(): Promise<void> {
    const gateway = this.gateway();
    if (!gateway) return;
    const state = this.load(gateway);
    const { probeTimeoutMs, probeIntervalMs } = gateway.config.health;
    const vars = this.env as unknown as Record<string, string | undefined>;
    // Each result counts as soon as it comes: one backend that hangs until the probe's timeout
    // does not hold back what the others' probes found.
    await Promise.all(
      [...gateway.endpoints.values()].map(async (endpoint) => {
        const probe = await this.probe(
          endpoint.healthUrl,
          probeTimeoutMs,
          backendHeaders(endpoint.kind, endpoint.secret ? vars[endpoint.secret] : undefined),
        );
        const record = state.endpoints[endpoint.id]!;
        record.probe = probe;
        // Recovery the probes can see ends an ejection at once: it was an outage, and it is over.
        if (probe.ok && !record.probeOk) record.ejectedUntil = 0;
        record.probeOk = probe.ok;
        this.settle(gateway, state, Date.now());
        this.save(state);
      }),
    );
    if (Date.now() - this.lastRead < IDLE_MS) await this.ctx.storage.setAlarm(Date.now() + probeIntervalMs);
  }
}
