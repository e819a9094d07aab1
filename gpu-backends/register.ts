/**
 * Registers one region's GPU pools with the edge: merges the region root's `terraform output -json`
 * into the gateway configuration (GATEWAY_CONFIG) that `npm start` and the deployed Worker read,
 * once the result passes the edge's own schema, and prints the secrets to set. Exit codes: 0 done,
 * 1 invalid output or configuration (nothing written), 2 bad arguments.
 *
 *   terraform -chdir=gpu-backends/terraform/regions/us-east output -json | npx tsx gpu-backends/register.ts
 *   npx tsx gpu-backends/register.ts --config gateway.json us-east.json
 */
import { readFile, rename, writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import {
  RegistrationError,
  assertLoads,
  mergeRegion,
  readConfigFile,
  readTerraformOutput,
  removeRegion,
  secretCommands,
} from "./registration.js";

const USAGE = `Usage: npx tsx gpu-backends/register.ts [options] [terraform-output.json]

Merges a region's pools, from its root's \`terraform output -json\` (a file, or stdin when none
or "-" is given), into the edge's gateway configuration.

  --config <file>   the configuration to update (default gateway.json; created when absent)
  --remove          take the region's endpoints out instead, before \`terraform destroy\`
  --dry-run         print the resulting configuration instead of writing it
  -h, --help        this text
`;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

async function readIfPresent(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

async function main(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        config: { type: "string", default: "gateway.json" },
        remove: { type: "boolean", default: false },
        "dry-run": { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (args.values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (args.positionals.length > 1) {
    process.stderr.write(`error: one terraform output at a time\n\n${USAGE}`);
    return 2;
  }
  const source = args.positionals[0] ?? "-";
  if (source === "-" && process.stdin.isTTY) {
    process.stderr.write(`error: pipe \`terraform output -json\` in, or name its file\n\n${USAGE}`);
    return 2;
  }
  const { config: path, remove } = args.values;
  const dryRun = args.values["dry-run"];
  // With --dry-run stdout carries the configuration, so the summary goes to stderr.
  const say = (line: string) => (dryRun ? process.stderr : process.stdout).write(line + "\n");

  try {
    const text = source === "-" ? await readStdin() : await readIfPresent(source);
    if (text === undefined) throw new RegistrationError(`${source} does not exist`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new RegistrationError(`${source === "-" ? "stdin" : source} is not JSON: ${(err as Error).message}`);
    }
    const region = readTerraformOutput(json);
    const before = readConfigFile(await readIfPresent(path));
    const after = remove ? removeRegion(before, region) : mergeRegion(before, region);
    assertLoads(after);
    const out = JSON.stringify(after, null, 2) + "\n";
    if (dryRun) process.stdout.write(out);
    else {
      await writeFile(`${path}.tmp`, out);
      await rename(`${path}.tmp`, path);
    }

    const endpoints = Object.entries(region.pools).flatMap(([pool, p]) => p.endpoints.map((e) => ({ pool, ...e })));
    if (remove) {
      say(`Removed from ${path}: ${endpoints.map((e) => e.id).join(", ")}.`);
      say(
        `Deploy the configuration again (npx wrangler secret put GATEWAY_CONFIG < ${path}) before destroying the region.`,
      );
      return 0;
    }
    say(`${dryRun ? "Would register" : "Registered"} in ${path}:`);
    const width = (key: "pool" | "id" | "url") => Math.max(...endpoints.map((e) => e[key].length));
    for (const e of endpoints)
      say(
        `  ${e.pool.padEnd(width("pool"))}  ${e.id.padEnd(width("id"))}  ${e.url.padEnd(width("url"))}  capacity ${e.capacity}`,
      );
    const secrets = secretCommands(region);
    if (secrets.length) {
      say("\nOn first registration (or to rotate), give each endpoint's token the same value in AWS and at the edge:");
      for (const line of secrets) say(line && `  ${line}`);
    }
    say("Then point the edge at the configuration:");
    say(`  GATEWAY_CONFIG=${path} npm start                     # local edge`);
    say(`  npx wrangler secret put GATEWAY_CONFIG < ${path}     # deployed edge`);
    return 0;
  } catch (err) {
    if (!(err instanceof RegistrationError)) throw err;
    process.stderr.write(`error: ${err.message}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
