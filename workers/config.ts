import { z } from "zod";

/** The environment, validated once per isolate: a typo in a var fails loudly instead of at 3 a.m. */
const ConfigSchema = z.object({
  ADMIN_SECRET: z.string().min(32, "ADMIN_SECRET must be at least 32 characters").optional(),
  KEY_CACHE_TTL_SECONDS: z.coerce.number().int().min(0).max(3600).default(30),
  MAX_BODY_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(100 * 1024 * 1024)
    .default(1024 * 1024),
  BODY_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(600).default(30),
});

export type Config = z.infer<typeof ConfigSchema>;

/** An unset var and an empty one mean the same: `wrangler.toml` and `.dev.vars` cannot unset. */
const optional = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (v === "" ? undefined : v), schema.optional());

/**
 * The embedder's settings, validated apart from the rest: a mistake here fails only the requests
 * that embed (commit with chunks, search), so keys, workspace listing and deletion keep working
 * while the operator fixes it. `EMBEDDING_API_KEY` is a secret (`wrangler secret put`, `.dev.vars`).
 */
const EmbedderConfigSchema = z
  .object({
    EMBEDDER: z.enum(["builtin", "openai"]).default("builtin"),
    EMBEDDING_BASE_URL: z.url({ protocol: /^https?$/ }).default("https://api.openai.com/v1"),
    EMBEDDING_MODEL: optional(z.string().trim().min(1)),
    EMBEDDING_DIMENSIONS: optional(z.coerce.number().int().min(1).max(4096)),
    EMBEDDING_BATCH: z.coerce.number().int().min(1).max(2048).default(256),
    EMBEDDING_API_KEY: optional(z.string().min(1)),
  })
  .superRefine((config, ctx) => {
    if (config.EMBEDDER !== "openai") return;
    for (const name of ["EMBEDDING_MODEL", "EMBEDDING_API_KEY"] as const) {
      if (!config[name]) ctx.addIssue({ code: "custom", path: [name], message: "required when EMBEDDER is openai" });
    }
  });

export type EmbedderConfig = z.infer<typeof EmbedderConfigSchema>;

/**
 * Where new workspaces keep their vectors: "r2" (the embedded default) or "turbopuffer", which
 * needs the secret TURBOPUFFER_API_KEY. Validated apart, like the embedder's settings.
 */
const IndexConfigSchema = z
  .object({
    INDEX_BACKEND: z.enum(["r2", "turbopuffer"]).default("r2"),
    TURBOPUFFER_API_KEY: optional(z.string().min(1)),
    TURBOPUFFER_BASE_URL: optional(z.url({ protocol: /^https?$/ })),
    TURBOPUFFER_REGION: optional(z.string().regex(/^[a-z0-9-]{1,64}$/)),
  })
  .superRefine((config, ctx) => {
    if (config.INDEX_BACKEND === "turbopuffer" && !config.TURBOPUFFER_API_KEY)
      ctx.addIssue({
        code: "custom",
        path: ["TURBOPUFFER_API_KEY"],
        message: "required when INDEX_BACKEND is turbopuffer",
      });
  });

export type IndexConfig = z.infer<typeof IndexConfigSchema>;

export class ConfigError extends Error {}

/**
 * A loader for one group of settings: parsed once per isolate (per `env` object), and failing with
 * an error that names each bad setting, never its value.
 */
function loader<S extends z.ZodType>(schema: S, what: string): (env: Env) => z.output<S> {
  const parsed = new WeakMap<object, z.output<S>>();
  return (env) => {
    const cached = parsed.get(env);
    if (cached) return cached;
    const result = schema.safeParse(env);
    if (!result.success) {
      const issues = result.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
      throw new ConfigError(`Invalid ${what}: ${issues.join("; ")}`);
    }
    parsed.set(env, result.data);
    return result.data;
  };
}

export const loadConfig: (env: Env) => Config = loader(ConfigSchema, "environment");
/** The embedder's settings. */
export const loadEmbedderConfig: (env: Env) => EmbedderConfig = loader(EmbedderConfigSchema, "embedder settings");
/** The index backend's settings. */
export const loadIndexConfig: (env: Env) => IndexConfig = loader(IndexConfigSchema, "index backend settings");
