/**
 * `npm run deploy`: the D1 migrations applied remotely, then `wrangler deploy`.
 *
 * With `--containers`, agent tasks' sandbox hosts run as Cloudflare Containers, one per task: the
 * deployment's configuration is `wrangler.toml` with the container attached to the `SandboxContainer`
 * class (its image built from `sandboxes/container/Dockerfile`, which needs Docker where this runs),
 * written to `wrangler.containers.toml` beside it, and the Worker is deployed with
 * `SANDBOX_HOSTS=containers`. `wrangler.toml` itself declares no container, so nothing local needs Docker.
 *
 *   npm run deploy [-- --containers [--max-containers N]] [-- --dry-run]
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

export const ROOT = new URL("../", import.meta.url).pathname;
export const CONTAINERS_CONFIG = "wrangler.containers.toml";

/** `wrangler.toml` with the sandbox host's container attached to `SandboxContainer`. */
export function containersConfig(base: string, maxInstances: number): string {
  if (!Number.isInteger(maxInstances) || maxInstances < 1)
    throw new Error(`--max-containers must be a whole number of at least 1, not ${maxInstances}.`);
  if (!/class_name = "SandboxContainer"/.test(base))
    throw new Error("wrangler.toml binds no SandboxContainer object to attach the container to.");
  return `${base.trimEnd()}

# Written by scripts/deploy.ts --containers from wrangler.toml: the sandbox host's container, one per task.
[[containers]]
class_name = "SandboxContainer"
image = "./sandboxes/container/Dockerfile"
image_build_context = "."
max_instances = ${maxInstances}
`;
}

function run(args: string[]): void {
  const result = spawnSync("npx", ["wrangler", ...args], { cwd: ROOT, stdio: "inherit" });
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      containers: { type: "boolean", default: false },
      "max-containers": { type: "string", default: "20" },
      "dry-run": { type: "boolean", default: false },
    },
  });
  const dryRun = values["dry-run"];
  if (!dryRun) run(["d1", "migrations", "apply", "DB", "--remote"]);
  const deploy = ["deploy", ...(dryRun ? ["--dry-run"] : [])];
  if (values.containers) {
    const config = containersConfig(
      readFileSync(join(ROOT, "wrangler.toml"), "utf8"),
      Number(values["max-containers"]),
    );
    writeFileSync(join(ROOT, CONTAINERS_CONFIG), config);
    deploy.push("--config", CONTAINERS_CONFIG, "--var", "SANDBOX_HOSTS:containers");
  }
  run(deploy);
}
