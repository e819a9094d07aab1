import { Hono } from "hono";
import type { EndpointStatus, GatewayStatus, PoolStatus } from "../../../protocol/gateway.js";
import type { AppEnv } from "../../app-env.js";
import { rampProgress, slowStartShare } from "../../gateway/balancer.js";
import type { ResolvedEndpoint } from "../../gateway/config.js";
import { gatewayRuntime, healthRecords } from "../../gateway/runtime.js";
import { ConfigError } from "../../config.js";
import { ApiError } from "../../problem.js";

const iso = (ms: number | null | undefined) => (ms ? new Date(ms).toISOString() : null);
const future = (ms: number, now: number) => (ms > now ? new Date(ms).toISOString() : null);

/** The base URL as configured, less anything that could carry a credential. */
function displayUrl(url: string): string {
  const parsed = new URL(url);
  parsed.username = "";
  parsed.password = "";
  parsed.search = "";
  parsed.hash = "";
  return parsed.toString().replace(/\/+$/, "");
}

/**
 * The backends as an operator sees them: each pool's state and recovery ramp, and each endpoint's
 * last probe, ejection and slow start from the shared health object, beside the in-flight counts
 * and outlier ejections of the isolate that answers.
 */
export const adminGateway = new Hono<AppEnv>().get("/", async (c) => c.json(await gatewayStatus(c.env)));

/** The gateway as `GET /admin/gateway` (and the dashboard) shows it; throws the problem to answer when it cannot. */
export async function gatewayStatus(env: Env): Promise<GatewayStatus> {
  let runtime: ReturnType<typeof gatewayRuntime>;
  try {
    runtime = gatewayRuntime(env);
  } catch (err) {
    // The operator asked: tell them what is wrong with the configuration.
    if (err instanceof ConfigError)
      throw new ApiError("internal", `The gateway's configuration is invalid. ${err.message}`);
    throw err;
  }
  if (!runtime)
    throw new ApiError(
      "not_found",
      'No inference backends are configured on this edge: set GATEWAY_CONFIG or INFERENCE_UPSTREAM (docs/gateway.md, "Pointing it at real backends").',
    );
  const { gateway, balancer } = runtime;
  let records: Awaited<ReturnType<typeof healthRecords>>;
  try {
    records = await healthRecords(env);
  } catch {
    throw new ApiError("unavailable", "The gateway's health object did not answer; retry shortly.", {
      headers: { "Retry-After": "1" },
    });
  }
  const now = Date.now();

  const pools: PoolStatus[] = gateway.pools.map((pool) => {
    const shared = records?.pools[pool.name];
    const started = shared?.outageEndedAt ?? null;
    const admitted = rampProgress(started, pool.recovery.rampMs, now);
    return {
      name: pool.name,
      role: pool.role,
      models: pool.models,
      down: shared?.down ?? false,
      ramp:
        started !== null && admitted < 1
          ? { startedAt: iso(started)!, endsAt: iso(started + pool.recovery.rampMs)!, admitted }
          : null,
      endpoints: pool.endpoints.map((e) => e.id),
    };
  });

  /** The longest slow start of the pools that list it: the one that holds it back longest. */
  const slowStartWindow = (endpoint: ResolvedEndpoint) =>
    Math.max(
      0,
      ...gateway.pools
        .filter((pool) => pool.endpoints.some((e) => e.id === endpoint.id))
        .map((pool) => pool.recovery.slowStartMs),
    );

  const endpoints: EndpointStatus[] = [...gateway.endpoints.values()].map((endpoint) => {
    const record = records?.endpoints[endpoint.id];
    const local = balancer.endpoints.get(endpoint.id);
    const since = Math.max(record?.since ?? 0, local?.recoveredAt ?? 0);
    const probe = record?.probe;
    return {
      id: endpoint.id,
      region: endpoint.region,
      kind: endpoint.kind,
      url: displayUrl(endpoint.url),
      model: endpoint.model ?? null,
      capacity: endpoint.capacity,
      weight: endpoint.weight,
      secret: endpoint.secret ?? null,
      health: {
        routable: record?.routable ?? true,
        probe: probe ? { ...probe, at: iso(probe.at)!, ms: Math.round(probe.ms * 10) / 10 } : null,
        ejectedUntil: record ? future(record.ejectedUntil, now) : null,
        since: iso(record?.since),
        slowStart: slowStartShare(since, slowStartWindow(endpoint), now),
      },
      isolate: {
        inflight: local?.inflight ?? 0,
        failures: local?.failures ?? 0,
        ejectedUntil: local ? future(local.ejectedUntil, now) : null,
        probation: local?.probation ?? false,
        fullUntil: local ? future(local.fullUntil, now) : null,
      },
    };
  });

  const status: GatewayStatus = {
    at: new Date(now).toISOString(),
    source: gateway.source,
    probeIntervalMs: gateway.config.health.probeIntervalMs,
    pools,
    endpoints,
    backgroundYield: balancer.backgroundGate.status(now),
  };
  return status;
}
