/**
 * The inference gateway's backend configuration: pools of regional endpoints, as data.
 * The edge validates `GATEWAY_CONFIG` with this schema; the Terraform in `gpu-backends/` emits
 * exactly this shape, and its checks validate those outputs with the same schema.
 */
import { z } from "zod";

/** What a pool serves. */
export const POOL_ROLES = ["tab", "apply", "chat", "embed"] as const;
export const PoolRole = z.enum(POOL_ROLES);
export type PoolRole = z.infer<typeof PoolRole>;

/**
 * Priority classes, highest first. A request's class is its pool's role (embeddings count as
 * background work), lowered to `background` when the client marks it so with `X-Sextant-Priority`.
 */
export const PRIORITY_CLASSES = ["tab", "chat", "apply", "background"] as const;
export const PriorityClass = z.enum(PRIORITY_CLASSES);
export type PriorityClass = z.infer<typeof PriorityClass>;

/**
 * What an endpoint runs: it decides how FIM and `prediction` are sent and where health is probed.
 * `anthropic` is Anthropic's Messages API, for chat and apply pools: the edge translates requests
 * and answers, so clients still speak OpenAI's API.
 */
export const ENDPOINT_KINDS = ["vllm", "sglang", "openai", "anthropic"] as const;
export const EndpointKind = z.enum(ENDPOINT_KINDS);
export type EndpointKind = z.infer<typeof EndpointKind>;

/** Model families whose fill-in-the-middle template the edge can render. */
export const FIM_FAMILIES = ["qwen2.5-coder", "deepseek-coder", "starcoder2", "codellama", "codestral"] as const;
export const FimFamily = z.enum(FIM_FAMILIES);
export type FimFamily = z.infer<typeof FimFamily>;

const ENV_NAME = /^[A-Z][A-Z0-9_]{0,63}$/;
const ms = (max: number) => z.number().int().min(1).max(max);

export const Endpoint = z
  .object({
    /**
     * Names one server across the whole configuration: pools that share a server list it under the
     * same id, alike in its `SERVER_FIELDS`. Shows up in health, logs and metrics.
     */
    id: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, "lower-case letters, digits, '.', '_' and '-'"),
    region: z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/),
    latitude: z.number().min(-90).max(90),
    longitude: z.number().min(-180).max(180),
    /** The base URL, ending in `/v1` (OpenAI-compatible servers; `https://api.anthropic.com/v1` for Anthropic). */
    url: z.url({ protocol: /^https?$/ }),
    /** The model name the backend serves; omitted, the client's model is sent unchanged. */
    model: z.string().min(1).max(256).optional(),
    /**
     * The checkpoint it serves, as operators name it (`tab-2026-11-26b`): recorded with each of its
     * requests in the lake, so that acceptance can be compared checkpoint by checkpoint.
     */
    checkpoint: z.string().min(1).max(128).optional(),
    kind: EndpointKind,
    /** Concurrent requests it serves at full speed; the edge never sends it more. */
    capacity: z.number().int().min(1).max(100_000),
    /** Relative share among endpoints of the same region. */
    weight: z.number().positive().max(1000).default(1),
    /** Name of the Worker secret sent as `Authorization: Bearer …`, or `x-api-key` to Anthropic (never the secret itself). */
    secret: z.string().regex(ENV_NAME, "an environment variable name such as POOL_TAB_KEY").optional(),
    /** Health URL; defaults to `/health` at the server root for vLLM and SGLang, `<url>/models` for the others. */
    health: z.url({ protocol: /^https?$/ }).optional(),
    /**
     * Anthropic only: mark each request's system prompt and conversation for Anthropic's prompt
     * cache, so that the next turn of a chat reads them from it (cache writes cost a little more
     * than plain input, reads a tenth of it). On unless set to false. OpenAI-compatible servers
     * cache on their own.
     */
    promptCaching: z.boolean().optional(),
  })
  .strict()
  .superRefine((endpoint, ctx) => {
    if (endpoint.kind !== "anthropic" && endpoint.promptCaching !== undefined)
      ctx.addIssue({ code: "custom", path: ["promptCaching"], message: "only Anthropic endpoints take promptCaching" });
  });
export type Endpoint = z.infer<typeof Endpoint>;

/**
 * An endpoint's id names one server: its health, ejections and capacity are shared by every pool
 * that lists it, so every pool must describe it alike in these fields. The rest (`model`,
 * `checkpoint`, `weight`, `promptCaching`) is the pool's own: what its requests send, and how it
 * ranks the server among its other endpoints.
 */
const SERVER_FIELDS = ["url", "kind", "region", "latitude", "longitude", "capacity", "secret", "health"] as const;

/**
 * The default of a pool's `heartbeatMs`: a stream that has sent the client nothing for this long
 * sends an SSE comment (`:`). A connection's close is only noticed when something is written to
 * it, so this bounds how long a cancelled request can keep its backend busy while the backend is
 * between tokens (or before its first). Clients ignore comments.
 */
export const HEARTBEAT_MS = 20;

export const Timeouts = z
  .object({
    /** Until the backend's response headers (Workers' fetch does not expose the TCP connect apart). */
    connectMs: ms(60_000).default(1_000),
    /** Until the first token (the first SSE event, or the whole body when not streaming). */
    firstByteMs: ms(600_000).default(5_000),
    /** Longest silence between two streamed events. */
    gapMs: ms(600_000).default(5_000),
    /** The whole request, failovers included. */
    deadlineMs: ms(3_600_000).default(60_000),
  })
  .strict();
export type Timeouts = z.infer<typeof Timeouts>;

/** What a model's tokens cost, in USD per million tokens. */
export const TokenPrice = z
  .object({
    input: z.number().min(0).max(1_000_000),
    output: z.number().min(0).max(1_000_000),
  })
  .strict();
export type TokenPrice = z.infer<typeof TokenPrice>;

export const Pool = z
  .object({
    role: PoolRole,
    /** Public model names clients ask for; `*` takes any name (and sends it on unchanged). */
    models: z.array(z.string().min(1).max(256)).min(1),
    /** FIM template for `/v1/completions` with `suffix` on vLLM and SGLang endpoints. */
    fim: FimFamily.optional(),
    endpoints: z.array(Endpoint).min(1),
    /**
     * What its models' tokens cost (prompt tokens at `input`, completion tokens at `output`): an eval
     * run of one of them keeps the price it was made with and reports each attempt's cost by it.
     */
    price: TokenPrice.optional(),
    timeouts: Timeouts.prefault({}),
    /** Tab only: send a second request to another region when the first token is this late. */
    hedgeAfterMs: ms(60_000).optional(),
    /**
     * Silence after which a stream sends an SSE comment, so that a client's disconnect is noticed
     * (and its backend request cancelled) within about this long; once tokens flow, only after a
     * silence of twice the stream's own gap as well (workers/gateway/heartbeat.ts). Every comment
     * costs the edge CPU, most while streams wait for a long prompt's first token: raise it for
     * pools where a slower cancellation is acceptable.
     */
    heartbeatMs: z.number().int().min(5).max(10_000).default(HEARTBEAT_MS),
    retries: z
      .object({
        /** Attempts per request, the first included. */
        maxAttempts: z.number().int().min(1).max(10).default(3),
        /** Retries in flight may be at most this share of the pool's requests in flight… */
        budgetRatio: z.number().min(0).max(1).default(0.2),
        /** …but this many are always allowed. */
        minRetries: z.number().int().min(0).max(1000).default(3),
      })
      .strict()
      .prefault({}),
    recovery: z
      .object({
        /** After a total outage, admission grows from paid tiers to all users over this window. */
        rampMs: z.number().int().min(0).max(3_600_000).default(30_000),
        /** A recovered endpoint's capacity grows linearly from a tenth to all over this window. */
        slowStartMs: z.number().int().min(0).max(3_600_000).default(30_000),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((pool, ctx) => {
    const needsFim = pool.role === "tab" && pool.endpoints.some((e) => e.kind === "vllm" || e.kind === "sglang");
    if (needsFim && !pool.fim)
      ctx.addIssue({ code: "custom", path: ["fim"], message: "required for a tab pool with vLLM or SGLang endpoints" });
    if (pool.role !== "chat" && pool.role !== "apply")
      pool.endpoints.forEach((e, i) => {
        if (e.kind === "anthropic")
          ctx.addIssue({
            code: "custom",
            path: ["endpoints", i, "kind"],
            message:
              "Anthropic endpoints serve chat and apply pools only (the Messages API has no completions or embeddings)",
          });
      });
    if (pool.hedgeAfterMs !== undefined && pool.role !== "tab")
      ctx.addIssue({ code: "custom", path: ["hedgeAfterMs"], message: "only tab pools hedge" });
  });
export type Pool = z.infer<typeof Pool>;

export const ClassBudget = z
  .object({
    /** Requests of this class in flight per isolate before it is shed with 429. */
    concurrency: z.number().int().min(1).max(1_000_000),
    /**
     * Share of an endpoint's capacity this class may fill. Lower classes get smaller shares, so
     * that when backends are full they are shed first and tab always finds room.
     */
    share: z.number().min(0.05).max(1),
  })
  .strict();

export const GatewayConfig = z
  .object({
    pools: z.record(z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/), Pool),
    /** Where a request comes from when `request.cf` has no location (local runs). */
    defaultLocation: z
      .object({ latitude: z.number().min(-90).max(90), longitude: z.number().min(-180).max(180) })
      .strict()
      .default({ latitude: 39.04, longitude: -77.49 }),
    health: z
      .object({
        /** Active probes from the health object's alarm. */
        probeIntervalMs: z.number().int().min(100).max(600_000).default(5_000),
        probeTimeoutMs: z.number().int().min(50).max(60_000).default(2_000),
        /** Consecutive failures (real traffic) that eject an endpoint… */
        ejectAfterFailures: z.number().int().min(1).max(100).default(3),
        /** …for this long, doubled on each ejection in a row. */
        ejectionMs: z.number().int().min(100).max(3_600_000).default(10_000),
        /** How stale an isolate's health snapshot may get before it refreshes it in the background. */
        snapshotMaxAgeMs: z.number().int().min(100).max(600_000).default(1_000),
      })
      .strict()
      .prefault({}),
    classes: z
      .object({
        tab: ClassBudget.default({ concurrency: 10_000, share: 1 }),
        chat: ClassBudget.default({ concurrency: 2_000, share: 0.9 }),
        apply: ClassBudget.default({ concurrency: 1_000, share: 0.75 }),
        background: ClassBudget.default({ concurrency: 500, share: 0.5 }),
      })
      .strict()
      .prefault({}),
    /** How long a tab request may wait for a free slot before it is refused. */
    tabQueueMs: z.number().int().min(0).max(10_000).default(250),
    /**
     * Background requests yield to interactive ones (`workers/gateway/yield.ts`): while a tab, chat or
     * apply request has started in the isolate within `interactiveMs`, background requests go one at
     * a time, each once the isolate's timers run at most `lagMs` late (smoothed), and none waits past
     * `maxWaitMs`. `lagMs` 0 turns it off.
     */
    backgroundYield: z
      .object({
        lagMs: z.number().min(0).max(1_000).default(0.25),
        pollMs: z.number().int().min(1).max(100).default(2),
        maxWaitMs: z.number().int().min(0).max(60_000).default(2_000),
        interactiveMs: z.number().int().min(0).max(60_000).default(1_000),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((config, ctx) => {
    const seen = new Map<string, { pool: string; endpoint: Endpoint }>();
    const models = new Map<string, string>();
    for (const [name, pool] of Object.entries(config.pools)) {
      pool.endpoints.forEach((endpoint, i) => {
        const first = seen.get(endpoint.id);
        if (!first) seen.set(endpoint.id, { pool: name, endpoint });
        else
          for (const field of SERVER_FIELDS)
            if (endpoint[field] !== first.endpoint[field])
              ctx.addIssue({
                code: "custom",
                path: ["pools", name, "endpoints", i, field],
                // Names the field, not its values: the message reaches clients, and a URL may carry credentials.
                message: `endpoint id ${endpoint.id} is one server, but pool ${name} gives it another ${field} than pool ${first.pool}`,
              });
      });
      for (const model of pool.models) {
        const route = `${pool.role === "embed" ? "embed" : pool.role === "tab" ? "completions" : "chat"}:${model}`;
        const owner = models.get(route);
        if (owner)
          ctx.addIssue({
            code: "custom",
            path: ["pools", name, "models"],
            message: `model ${model} is already served by pool ${owner}`,
          });
        models.set(route, name);
      }
    }
  });
export type GatewayConfig = z.infer<typeof GatewayConfig>;
export type GatewayConfigInput = z.input<typeof GatewayConfig>;

/** The header an editor sends so the edge can cancel a superseded tab request of the same session. */
export const SESSION_HEADER = "X-Sextant-Session";

/** The header that lowers a request to the background class (experiments, prefetches). */
export const PRIORITY_HEADER = "X-Sextant-Priority";

/** A stable per-user draw in [0, 1): a recovery ramp admitting share p admits the users below p (FNV-1a). */
export function userShare(userId: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < userId.length; i++) {
    h ^= userId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) / 2 ** 32;
}

/** One health probe of an endpoint, as the health object last saw it. */
export const ProbeResult = z.object({
  at: z.iso.datetime(),
  ok: z.boolean(),
  /** The health URL's HTTP status; null when no answer came. */
  status: z.number().int().nullable(),
  /** Why no answer came: it took longer than `probeTimeoutMs`, or the connection failed. */
  error: z.enum(["timeout", "unreachable"]).nullable(),
  ms: z.number().nonnegative(),
});
export type ProbeResult = z.infer<typeof ProbeResult>;

/** An endpoint in `GET /admin/gateway`: its configuration, the shared health, and one isolate's view. */
export const EndpointStatus = z.object({
  id: z.string(),
  region: z.string(),
  kind: EndpointKind,
  /** The base URL without credentials, query or fragment. */
  url: z.string(),
  model: z.string().nullable(),
  capacity: z.number().int(),
  weight: z.number(),
  /** The name of the secret it is sent (never the value); the configuration is refused while one is not set. */
  secret: z.string().nullable(),
  /** Shared by every isolate (the health object). */
  health: z.object({
    /** Routable: the last probe passed and no isolate's ejection is in force. */
    routable: z.boolean(),
    /** The last probe, or null before the first. */
    probe: ProbeResult.nullable(),
    /** An ejection reported by an isolate that saw it fail real traffic, while in force. */
    ejectedUntil: z.iso.datetime().nullable(),
    /** When it last became routable again; null when it never was down. */
    since: z.iso.datetime().nullable(),
    /** Share of its capacity that slow start allows now (1 once recovered). */
    slowStart: z.number().min(0).max(1),
  }),
  /** This isolate only: each isolate keeps its own in-flight counts and outlier ejections. */
  isolate: z.object({
    inflight: z.number().int(),
    /** Failures on real traffic since its last success. */
    failures: z.number().int(),
    ejectedUntil: z.iso.datetime().nullable(),
    /** Back from an ejection: one request at a time until one succeeds. */
    probation: z.boolean(),
    /** It answered that it is full (429, 503, 529): no new requests from this isolate until then. */
    fullUntil: z.iso.datetime().nullable(),
  }),
});
export type EndpointStatus = z.infer<typeof EndpointStatus>;

export const PoolStatus = z.object({
  name: z.string(),
  role: PoolRole,
  models: z.array(z.string()),
  /** Every endpoint is out of rotation: requests get 503 until one comes back. */
  down: z.boolean(),
  /** After a total outage, the recovery ramp: null when none is in progress. */
  ramp: z
    .object({
      startedAt: z.iso.datetime(),
      endsAt: z.iso.datetime(),
      /** Share of free-tier users admitted now (paid tiers are admitted throughout). */
      admitted: z.number().min(0).max(1),
    })
    .nullable(),
  endpoints: z.array(z.string()),
});
export type PoolStatus = z.infer<typeof PoolStatus>;

/** `GET /admin/gateway`: the operator's view of the backends. */
export const GatewayStatus = z.object({
  at: z.iso.datetime(),
  /** Where the configuration came from. */
  source: z.enum(["GATEWAY_CONFIG", "INFERENCE_UPSTREAM"]),
  probeIntervalMs: z.number().int(),
  pools: z.array(PoolStatus),
  endpoints: z.array(EndpointStatus),
  /** This isolate only: how its background requests yield to interactive ones (`backgroundYield`). */
  backgroundYield: z
    .object({
      /** A tab, chat or apply request started here within `interactiveMs`: background requests wait their turn. */
      interactive: z.boolean(),
      /** How late this isolate's timers have been running lately (smoothed). */
      lagMs: z.number(),
      waiting: z.number().int(),
      /** Background requests that went at once, that took their turn in line, and those of them that were held. */
      bypassed: z.number().int(),
      admitted: z.number().int(),
      yielded: z.number().int(),
    })
    .optional(),
});
export type GatewayStatus = z.infer<typeof GatewayStatus>;
