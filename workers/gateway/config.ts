/**
 * The gateway's backends, from the environment: `GATEWAY_CONFIG` (the full configuration as JSON,
 * see protocol/gateway.ts) or, for one OpenAI-compatible server, the single setting
 * `INFERENCE_UPSTREAM` (its base URL). Parsed once per isolate.
 */
import { ANTHROPIC_VERSION } from "./anthropic.js";
import { z } from "zod";
import {
  EndpointKind,
  FimFamily,
  GatewayConfig,
  type Endpoint,
  type GatewayConfigInput,
  type Pool,
  type PoolRole,
  type PriorityClass,
  PRIORITY_CLASSES,
} from "../../protocol/gateway.js";
import { ConfigError } from "../config.js";

export type Surface = "completions" | "chat" | "embeddings";

export interface ResolvedPool extends Pool {
  name: string;
  endpoints: ResolvedEndpoint[];
  /** Its endpoints sit at more than one place, so the caller's location orders them. */
  spread: boolean;
}

/**
 * An endpoint as one pool lists it. Its id is one server, whose health and slots every pool that
 * lists it shares (the schema holds them alike in the server's fields); what a request sends, the
 * model name above all, is the pool's own.
 */
export interface ResolvedEndpoint extends Endpoint {
  healthUrl: string;
  /** `url` without trailing slashes: the API paths are appended to it. */
  base: string;
  /**
   * The highest class any pool listing this endpoint serves. A lower class is held to its share of
   * the endpoint only when a higher one may need the room; alone on its endpoints it uses them all.
   */
  topClass: PriorityClass;
}

export interface Gateway {
  config: GatewayConfig;
  pools: ResolvedPool[];
  /** One per server (endpoint id), for its health probes and status: as the first pool that lists it has it. */
  endpoints: Map<string, ResolvedEndpoint>;
  /** A stable fingerprint, so the health object knows when the configuration changed. */
  fingerprint: string;
  /** The setting it came from: the whole configuration, or one OpenAI-compatible server for every pool. */
  source: "GATEWAY_CONFIG" | "INFERENCE_UPSTREAM";
  poolFor(surface: Surface, model: string): ResolvedPool | undefined;
  /** Public model names, for `/v1/models`. */
  models(): { id: string; role: PoolRole; pool: string }[];
}

const optional = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (v === "" ? undefined : v), schema.optional());

const Shortcut = z.object({
  INFERENCE_UPSTREAM: z.url({ protocol: /^https?$/ }),
  INFERENCE_UPSTREAM_KIND: optional(EndpointKind),
  INFERENCE_UPSTREAM_FIM: optional(FimFamily),
  INFERENCE_UPSTREAM_CAPACITY: optional(z.coerce.number().int().min(1).max(100_000)),
});

/** One endpoint serving every pool, for any model name the client asks for. */
function shortcutConfig(env: Record<string, unknown>): GatewayConfigInput {
  const parsed = Shortcut.safeParse(env);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new ConfigError(`Invalid gateway settings: ${issues.join("; ")}`);
  }
  const s = parsed.data;
  const kind = s.INFERENCE_UPSTREAM_KIND ?? "openai";
  const endpoint = {
    id: "upstream",
    region: "local",
    latitude: 0,
    longitude: 0,
    url: s.INFERENCE_UPSTREAM.replace(/\/+$/, ""),
    kind,
    capacity: s.INFERENCE_UPSTREAM_CAPACITY ?? 64,
    ...(env.INFERENCE_UPSTREAM_API_KEY ? { secret: "INFERENCE_UPSTREAM_API_KEY" } : {}),
  };
  // Anthropic's Messages API serves chat only: tab and embedding requests find no pool.
  if (kind === "anthropic") return { pools: { chat: { role: "chat", models: ["*"], endpoints: [endpoint] } } };
  const fim = s.INFERENCE_UPSTREAM_FIM ?? (kind === "openai" ? undefined : "qwen2.5-coder");
  return {
    pools: {
      tab: { role: "tab", models: ["*"], endpoints: [endpoint], ...(fim ? { fim } : {}) },
      chat: { role: "chat", models: ["*"], endpoints: [endpoint] },
      embed: { role: "embed", models: ["*"], endpoints: [endpoint] },
    },
  };
}

function healthUrl(endpoint: Endpoint): string {
  if (endpoint.health) return endpoint.health;
  if (endpoint.kind === "openai" || endpoint.kind === "anthropic") return `${endpoint.url.replace(/\/+$/, "")}/models`;
  return new URL("/health", endpoint.url).toString();
}

/**
 * How a request to an endpoint of this kind carries its secret: `Authorization: Bearer` for
 * OpenAI-compatible servers, `x-api-key` and the API version for Anthropic's.
 */
export function backendHeaders(kind: EndpointKind, secret: string | undefined): Record<string, string> {
  if (kind === "anthropic")
    return { "anthropic-version": ANTHROPIC_VERSION, ...(secret ? { "x-api-key": secret } : {}) };
  return secret ? { Authorization: `Bearer ${secret}` } : {};
}

/** A pool's own class: its role, with embeddings counted as background work. */
export function poolClass(role: PoolRole): PriorityClass {
  return role === "embed" ? "background" : role;
}

const SURFACE_ROLES: Record<Surface, PoolRole[]> = {
  completions: ["tab"],
  chat: ["chat", "apply"],
  embeddings: ["embed"],
};

function resolve(config: GatewayConfig, source: Gateway["source"]): Gateway {
  const topClass = new Map<string, PriorityClass>();
  for (const pool of Object.values(config.pools))
    for (const { id } of pool.endpoints) {
      const cls = poolClass(pool.role);
      const known = topClass.get(id);
      if (!known || PRIORITY_CLASSES.indexOf(cls) < PRIORITY_CLASSES.indexOf(known)) topClass.set(id, cls);
    }
  const endpoints = new Map<string, ResolvedEndpoint>();
  const pools = Object.entries(config.pools).map(([name, pool]) => {
    const listed = pool.endpoints.map((endpoint) => ({
      ...endpoint,
      healthUrl: healthUrl(endpoint),
      base: endpoint.url.replace(/\/+$/, ""),
      topClass: topClass.get(endpoint.id)!,
    }));
    for (const endpoint of listed) if (!endpoints.has(endpoint.id)) endpoints.set(endpoint.id, endpoint);
    return {
      ...pool,
      name,
      endpoints: listed,
      spread: new Set(pool.endpoints.map((e) => `${e.latitude},${e.longitude}`)).size > 1,
    };
  });
  const byModel = new Map<string, ResolvedPool>();
  for (const pool of pools)
    for (const surface of Object.keys(SURFACE_ROLES) as Surface[])
      if (SURFACE_ROLES[surface].includes(pool.role))
        for (const model of pool.models) byModel.set(`${surface}\0${model}`, pool);
  return {
    config,
    pools,
    endpoints,
    fingerprint: JSON.stringify(config),
    source,
    poolFor: (surface, model) => byModel.get(`${surface}\0${model}`) ?? byModel.get(`${surface}\0*`),
    models: () =>
      pools.flatMap((pool) =>
        pool.models.filter((m) => m !== "*").map((id) => ({ id, role: pool.role, pool: pool.name })),
      ),
  };
}

const loaded = new WeakMap<object, Gateway | null>();

/** The isolate's gateway, or null when no backends are configured. Throws ConfigError when invalid. */
export function loadGateway(env: Env): Gateway | null {
  const cached = loaded.get(env);
  if (cached !== undefined) return cached;
  const vars = env as unknown as Record<string, unknown>;
  let input: unknown;
  let source: Gateway["source"];
  const raw = vars.GATEWAY_CONFIG;
  if (raw !== undefined && raw !== "") {
    source = "GATEWAY_CONFIG";
    try {
      input = typeof raw === "string" ? JSON.parse(raw) : raw;
    } catch (err) {
      throw new ConfigError(`GATEWAY_CONFIG is not valid JSON: ${(err as Error).message}`);
    }
  } else if (vars.INFERENCE_UPSTREAM) {
    source = "INFERENCE_UPSTREAM";
    input = shortcutConfig(vars);
  } else {
    loaded.set(env, null);
    return null;
  }
  const parsed = GatewayConfig.safeParse(input);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new ConfigError(`Invalid GATEWAY_CONFIG: ${issues.join("; ")}`);
  }
  const gateway = resolve(parsed.data, source);
  for (const endpoint of gateway.endpoints.values())
    if (endpoint.secret && !vars[endpoint.secret])
      throw new ConfigError(
        `GATEWAY_CONFIG: endpoint ${endpoint.id} needs the secret ${endpoint.secret}, which is not set`,
      );
  loaded.set(env, gateway);
  return gateway;
}
