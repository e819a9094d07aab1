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
});

export type Config = z.infer<typeof ConfigSchema>;

export class ConfigError extends Error {}

const parsed = new WeakMap<object, Config>();

export function loadConfig(env: Env): Config {
  const cached = parsed.get(env);
  if (cached) return cached;
  const result = ConfigSchema.safeParse(env);
  if (!result.success) {
    const issues = result.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new ConfigError(`Invalid environment: ${issues.join("; ")}`);
  }
  parsed.set(env, result.data);
  return result.data;
}
