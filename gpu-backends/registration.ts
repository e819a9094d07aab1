/**
 * Registering a region's GPU pools with the edge: a region root's `terraform output -json` is read
 * and checked with the edge's own schema (protocol/gateway.ts), its `gateway` output is merged
 * into the edge's GATEWAY_CONFIG, and the secrets its endpoints name are listed with the commands
 * that set them. Pure functions; gpu-backends/register.ts is the command around them.
 */
import { z } from "zod";
import { FimFamily, GatewayConfig, PoolRole, type Endpoint } from "../protocol/gateway.js";

export class RegistrationError extends Error {
  override name = "RegistrationError";
}

const issues = (error: z.ZodError) =>
  error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");

/** What the module's `edge_secrets` output says about each Worker secret. */
const EdgeSecret = z.object({ secret_arn: z.string().startsWith("arn:"), aws_region: z.string().min(1) }).strict();

/** `terraform output -json` (every output as { value, type, sensitive }) or `terraform output -json gateway`. */
const TerraformOutput = z.union([
  z.object({
    gateway: z.object({ value: z.unknown() }),
    edge_secrets: z.object({ value: z.record(z.string(), EdgeSecret) }).optional(),
  }),
  z.object({ pools: z.unknown() }).transform((gateway) => ({ gateway: { value: gateway }, edge_secrets: undefined })),
]);

export interface RegionPool {
  role: PoolRole;
  models: string[];
  fim?: FimFamily;
  endpoints: Endpoint[];
}

export interface RegionOutput {
  pools: Record<string, RegionPool>;
  /** Worker secret name → the Secrets Manager secret holding the same token, when the output has them. */
  secrets: Record<string, z.infer<typeof EdgeSecret>>;
}

/** A region's outputs, valid for the edge on their own (every endpoint complete, names unique). */
export function readTerraformOutput(json: unknown): RegionOutput {
  const outputs = TerraformOutput.safeParse(json);
  if (!outputs.success)
    throw new RegistrationError(`not the output of a region root (terraform output -json): ${issues(outputs.error)}`);
  const gateway = GatewayConfig.safeParse(outputs.data.gateway.value);
  if (!gateway.success)
    throw new RegistrationError(`the gateway output does not fit the edge: ${issues(gateway.error)}`);
  const pools: Record<string, RegionPool> = {};
  for (const [name, pool] of Object.entries(gateway.data.pools))
    pools[name] = {
      role: pool.role,
      models: pool.models,
      ...(pool.fim ? { fim: pool.fim } : {}),
      endpoints: pool.endpoints,
    };
  const secrets = outputs.data.edge_secrets?.value ?? {};
  for (const endpoint of Object.values(pools).flatMap((p) => p.endpoints))
    if (endpoint.secret && Object.keys(secrets).length && !secrets[endpoint.secret])
      throw new RegistrationError(
        `endpoint ${endpoint.id} names the secret ${endpoint.secret}, which edge_secrets lacks`,
      );
  return { pools, secrets };
}

/**
 * The edge's configuration file as the operator keeps it: only what registration touches is read
 * (the whole is validated with the edge's schema before it is written), the rest kept as it is.
 */
const ConfigFile = z
  .object({
    pools: z
      .record(
        z.string(),
        z
          .object({
            role: PoolRole,
            models: z.array(z.string()),
            fim: FimFamily.optional(),
            endpoints: z.array(z.object({ id: z.string() }).loose()),
          })
          .loose(),
      )
      .default({}),
  })
  .loose();
export type ConfigFile = z.infer<typeof ConfigFile>;

/** An existing configuration's text (empty or absent: no pools yet). */
export function readConfigFile(text: string | undefined): ConfigFile {
  if (text === undefined || text.trim() === "") return { pools: {} };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new RegistrationError(`the gateway configuration is not JSON: ${(err as Error).message}`);
  }
  const parsed = ConfigFile.safeParse(json);
  if (!parsed.success) throw new RegistrationError(`the gateway configuration is not valid: ${issues(parsed.error)}`);
  return parsed.data;
}

/**
 * Whether an endpoint is one this region's Terraform made: its host is under the same
 * `<region>.<domain>` as the output's endpoints (the module names every host `<group>.<region>.<domain>`).
 */
function ownedBy(region: RegionOutput): (endpoint: Record<string, unknown>) => boolean {
  const host = (url: unknown) => (typeof url === "string" && URL.canParse(url) ? new URL(url).hostname : "");
  const suffixes = new Set(
    Object.values(region.pools).flatMap((p) => p.endpoints.map((e) => host(e.url).replace(/^[^.]+/, ""))),
  );
  return (endpoint) => [...suffixes].some((suffix) => host(endpoint.url).endsWith(suffix));
}

/**
 * Adds a region, or brings it up to date: each of its pools joins the configuration's pool of the
 * same name (created if absent; role and FIM template must agree) with its public model names;
 * its endpoints replace those with the same id in place or are appended, and endpoints it made
 * earlier that its output no longer lists (a node group removed or unregistered) are dropped.
 * Registering twice changes nothing; everything else (timeouts, hedging, other endpoints) is kept.
 */
export function mergeRegion(config: ConfigFile, region: RegionOutput): ConfigFile {
  const current = new Set(Object.values(region.pools).flatMap((p) => p.endpoints.map((e) => e.id)));
  const owned = ownedBy(region);
  const pools: ConfigFile["pools"] = {};
  for (const [name, pool] of Object.entries(config.pools)) {
    const endpoints = pool.endpoints.filter((e) => !owned(e) || current.has(e.id));
    if (endpoints.length || region.pools[name]) pools[name] = { ...pool, endpoints };
  }
  for (const [name, incoming] of Object.entries(region.pools)) {
    const existing = pools[name];
    if (!existing) {
      pools[name] = { ...incoming, endpoints: [...incoming.endpoints] };
      continue;
    }
    if (existing.role !== incoming.role)
      throw new RegistrationError(
        `pool ${name} is a ${existing.role} pool at the edge but ${incoming.role} in Terraform`,
      );
    if (existing.fim && incoming.fim && existing.fim !== incoming.fim)
      throw new RegistrationError(
        `pool ${name} renders FIM as ${existing.fim} at the edge but its model here needs ${incoming.fim}`,
      );
    const byId = new Map(incoming.endpoints.map((e) => [e.id, e]));
    const known = new Set(existing.endpoints.map((e) => e.id));
    pools[name] = {
      ...existing,
      models: [...new Set([...existing.models, ...incoming.models])],
      ...(incoming.fim ? { fim: incoming.fim } : {}),
      endpoints: [
        ...existing.endpoints.map((e) => byId.get(e.id) ?? e),
        ...incoming.endpoints.filter((e) => !known.has(e.id)),
      ],
    };
  }
  return { ...config, pools };
}

/** Takes a region's endpoints out (before `terraform destroy`); a pool left with none goes too. */
export function removeRegion(config: ConfigFile, region: RegionOutput): ConfigFile {
  const ids = new Set(Object.values(region.pools).flatMap((p) => p.endpoints.map((e) => e.id)));
  const owned = ownedBy(region);
  const pools: ConfigFile["pools"] = {};
  for (const [name, pool] of Object.entries(config.pools)) {
    const endpoints = pool.endpoints.filter((e) => !ids.has(e.id) && !owned(e));
    if (endpoints.length) pools[name] = { ...pool, endpoints };
  }
  return { ...config, pools };
}

/** Throws why the edge would refuse the configuration, if it would. */
export function assertLoads(config: ConfigFile): void {
  const parsed = GatewayConfig.safeParse(config);
  if (!parsed.success) throw new RegistrationError(`the merged configuration would not load: ${issues(parsed.error)}`);
}

/** The shell commands that give one endpoint secret the same random token in AWS and at the edge. */
export function secretCommands(region: RegionOutput): string[] {
  const names = [
    ...new Set(
      Object.values(region.pools)
        .flatMap((p) => p.endpoints)
        .flatMap((e) => (e.secret ? [e.secret] : [])),
    ),
  ];
  return names.flatMap((name) => {
    const aws = region.secrets[name];
    return [
      `KEY=$(openssl rand -hex 32)`,
      aws
        ? `aws secretsmanager put-secret-value --region ${aws.aws_region} --secret-id ${aws.secret_arn} --secret-string "$KEY"`
        : `# put "$KEY" in the Secrets Manager secret behind ${name} (see terraform output edge_secrets)`,
      `printf %s "$KEY" | npx wrangler secret put ${name}   # deployed edge`,
      `echo "${name}=$KEY" >> .dev.vars   # local edge`,
      "",
    ];
  });
}
