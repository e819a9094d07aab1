/**
 * `npm start`: the local edge (the deployable bundle on Miniflare, `scripts/edge.ts`) with local D1,
 * R2 and Durable Objects, migrations applied first, and a development account whose key the CLI
 * finds by itself. `npm run dev` (`--dev`) runs the same under `wrangler dev` instead, which
 * reloads on save at the cost of a proxy hop and an inspector on every request.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Sextant, SextantAdmin } from "../client/sdk/client.js";
import { AuthenticationError } from "../client/sdk/errors.js";
import {
  LocalEdge,
  localEdgePath,
  localEdgePathFor,
  readJsonFile,
  writeSecretFile,
} from "../client/cli/credentials.js";
import { loadAgentScripts } from "../gpu-backends/simulator/agent-script.js";
import { startSimulator, type Simulator } from "../gpu-backends/simulator/simulator.js";
import {
  chooseDriver,
  driverBanner,
  startLocalSandboxHost,
  type DriverChoice,
  type LocalSandboxHost,
} from "./local-sandbox.js";
import { startEdge } from "./edge.js";
import { LOCAL_BACKENDS, LOCAL_MODELS, localGatewayConfig, realModelHint, unscriptedAdvice } from "./local-gateway.js";
import { makePrivate, withPrivateUmask } from "./private-state.js";

const DEV_EMAIL = "dev@sextant.localhost";

const { values: args } = parseArgs({
  options: {
    port: { type: "string", default: process.env.SEXTANT_PORT ?? "8787" },
    ip: { type: "string", default: "127.0.0.1" },
    "persist-to": { type: "string", default: ".wrangler/state" },
    /** Overrides a `[vars]` entry, as `NAME:value`; repeatable. */
    var: { type: "string", multiple: true, default: [] },
    /** Under `wrangler dev`, reloading on save. */
    dev: { type: "boolean", default: false },
    /** A line per request on the console (always on with `--dev`). */
    "log-requests": { type: "boolean", default: false },
    /** Scripts for the simulator's scripted agent model (`gpu-backends/simulator/README.md`). */
    "agent-scripts": {
      type: "string",
      default: process.env.SEXTANT_AGENT_SCRIPTS ?? "gpu-backends/simulator/agent-scripts",
    },
  },
});
const baseURL = `http://${args.ip}:${args.port}`;
/** How the user started this, for the lines the console suggests. */
const command = args.dev ? "npm run dev" : "npm start";
const wranglerEnv = { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" };

/**
 * The admin secret lives in `.dev.vars` (git-ignored), created with a random value on first run.
 * Several edges started at once from one checkout (tests do this) must agree on it: the file is
 * created exclusively, and whoever loses that race reads the winner's secret.
 */
function ensureAdminSecret(): string {
  for (;;) {
    let vars: string | undefined;
    try {
      vars = readFileSync(".dev.vars", "utf8");
    } catch {
      // First run.
    }
    const existing = vars?.match(/^ADMIN_SECRET\s*=\s*"?([^"\n]+)"?\s*$/m)?.[1];
    if (existing) return existing;
    const secret = randomBytes(32).toString("hex");
    if (vars !== undefined) {
      writeFileSync(".dev.vars", `${vars}${vars && !vars.endsWith("\n") ? "\n" : ""}ADMIN_SECRET=${secret}\n`, {
        mode: 0o600,
      });
      return secret;
    }
    try {
      writeFileSync(".dev.vars", `ADMIN_SECRET=${secret}\n`, { mode: 0o600, flag: "wx" });
      return secret;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      // Another edge created it a moment ago: use its secret.
    }
  }
}

const GATEWAY_VARS = ["GATEWAY_CONFIG", "INFERENCE_UPSTREAM"];

/** Whether a Worker variable is set by `--var` or `.dev.vars`, which the environment does not override. */
function givenElsewhere(name: string): boolean {
  let devVars = "";
  try {
    devVars = readFileSync(".dev.vars", "utf8");
  } catch {
    // None.
  }
  return args.var.some((v) => v.startsWith(`${name}:`)) || new RegExp(`^${name}\\s*=`, "m").test(devVars);
}

/**
 * Where model requests go: a gateway setting from the environment (`GATEWAY_CONFIG` as JSON or a
 * path to a JSON file, or `INFERENCE_UPSTREAM`), from `--var` or `.dev.vars`; otherwise the
 * simulator, started here. `AGENT_MODEL` comes from the environment too, so that one line names
 * both a server and the model agent tasks ask it for. `upstream` names a server the environment gave.
 */
async function gatewayVars(): Promise<{ vars: string[]; simulator?: Simulator; upstream?: string }> {
  const vars: string[] = [];
  if (process.env.AGENT_MODEL && !givenElsewhere("AGENT_MODEL")) vars.push(`AGENT_MODEL:${process.env.AGENT_MODEL}`);
  if (GATEWAY_VARS.some(givenElsewhere)) return { vars };
  for (const name of [
    "INFERENCE_UPSTREAM",
    "INFERENCE_UPSTREAM_KIND",
    "INFERENCE_UPSTREAM_FIM",
    "INFERENCE_UPSTREAM_API_KEY",
  ])
    if (process.env[name]) vars.push(`${name}:${process.env[name]}`);
  const config = process.env.GATEWAY_CONFIG;
  if (config) vars.push(`GATEWAY_CONFIG:${config.trimStart().startsWith("{") ? config : readFileSync(config, "utf8")}`);
  if (config) return { vars, upstream: "the backends GATEWAY_CONFIG names" };
  if (process.env.INFERENCE_UPSTREAM) return { vars, upstream: process.env.INFERENCE_UPSTREAM };
  const agentScripts = existsSync(args["agent-scripts"]) ? loadAgentScripts(args["agent-scripts"]) : [];
  // The control API can rewrite every answer the backends give: only who holds its token may use it.
  const token = process.env.SIMULATOR_CONTROL_TOKEN || undefined;
  if (token !== undefined && token.length < 16) {
    console.error("SIMULATOR_CONTROL_TOKEN must be 16 characters or more.");
    process.exit(2);
  }
  const simulator = await startSimulator({
    backends: LOCAL_BACKENDS.map((b) => ({ ...b, agentScripts, unscriptedAdvice: unscriptedAdvice(command) })),
    control: token ? { token } : true,
  });
  const urls = Object.fromEntries(simulator.backends.map((b) => [b.id, b.url]));
  console.log(`Simulated GPU backends: ${simulator.backends.map((b) => `${b.id} ${b.url}`).join(", ")}`);
  return { vars: [...vars, `GATEWAY_CONFIG:${JSON.stringify(localGatewayConfig(urls))}`], simulator };
}

/**
 * The model agent tasks ask for: `AGENT_MODEL` as the edge gets it (`--var` or the environment,
 * then `.dev.vars`, then `wrangler.toml`), else the edge's default, the simulator's chat model.
 */
function agentModel(vars: string[]): string {
  const passed = vars.findLast((v) => v.startsWith("AGENT_MODEL:"));
  if (passed) return passed.slice("AGENT_MODEL:".length);
  for (const file of [".dev.vars", "wrangler.toml"]) {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    const value = /^AGENT_MODEL\s*=\s*"?([^"\n]+?)"?\s*$/m.exec(text)?.[1];
    if (value) return value;
  }
  return LOCAL_MODELS.chat;
}

/**
 * Where model requests go when the environment named a server, and what agent tasks ask it for:
 * `INFERENCE_UPSTREAM` passes model names through, so the simulator's default there fails every task.
 */
function upstreamLine(upstream: string, model: string): string {
  let shown = upstream;
  try {
    const url = new URL(upstream);
    url.username = url.password = "";
    shown = url.toString();
  } catch {
    // A description, not a URL.
  }
  return (
    `Model requests go to ${shown}; agent tasks ask it for ${model}` +
    (model === LOCAL_MODELS.chat && !process.env.GATEWAY_CONFIG
      ? `, the simulator's model, which it will not serve: set AGENT_MODEL to one of its models beside ` +
        `INFERENCE_UPSTREAM (e.g. AGENT_MODEL=qwen2.5-coder:7b).\n`
      : ` (AGENT_MODEL).\n`)
  );
}

/**
 * Applies D1 migrations and says so in one line: wrangler prints its table of migrations again
 * after each one it applies, which on a first start is the same table four times.
 */
function applyMigrations(): void {
  const prebuilt = process.env.SEXTANT_PREBUILT_EDGE;
  if (prebuilt) {
    // No wrangler where a prebuilt edge runs: its state comes with the migrations applied.
    if (!existsSync(join(args["persist-to"], "v3", "d1")))
      cpSync(join(prebuilt, "state"), args["persist-to"], { recursive: true });
    console.log("D1 migrations: applied in the prebuilt edge's state.");
    return;
  }
  const result = spawnSync(
    "npx",
    ["wrangler", "d1", "migrations", "apply", "DB", "--local", "--persist-to", args["persist-to"]],
    { stdio: ["ignore", "pipe", "pipe"], env: wranglerEnv, encoding: "utf8" },
  );
  if (result.status !== 0) {
    process.stdout.write(result.stdout ?? "");
    process.stderr.write(result.stderr ?? "");
    console.error("Applying D1 migrations failed; see above.");
    process.exit(1);
  }
  const lastTable = result.stdout.slice(result.stdout.lastIndexOf("┌"));
  const applied = [...lastTable.matchAll(/│ (\S+\.sql)\s+│ ✅/g)].map((m) => m[1]);
  console.log(
    result.stdout.includes("No migrations to apply") || applied.length === 0
      ? "D1 migrations: up to date."
      : `D1 migrations applied: ${applied.join(", ")}.`,
  );
}

async function waitForHealth(exitCode: () => number | undefined, deadlineMs = 90_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (exitCode() !== undefined) throw new Error(`the edge exited with code ${exitCode()}`);
    try {
      if ((await fetch(`${baseURL}/healthz`)).ok) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`The edge did not answer ${baseURL}/healthz within ${deadlineMs / 1000} s`);
}

/** Whether an edge answers at `url` (the one `local-edge.json` names may have stopped long ago). */
async function answers(url: string): Promise<boolean> {
  try {
    return (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) })).ok;
  } catch {
    return false;
  }
}

/**
 * Saves this edge's key in its own file, and makes it the CLI's default (`local-edge.json`) unless
 * another local edge that is still running already is: a second edge (`npm run dev -- --port …`)
 * must not take the CLI away from the first. Returns the default edge's address when it is another.
 */
async function saveLocalEdge(local: LocalEdge): Promise<string | undefined> {
  await writeSecretFile(localEdgePathFor(baseURL), local);
  const current = await readJsonFile(localEdgePath(), LocalEdge);
  if (current && current.baseURL !== baseURL && (await answers(current.baseURL))) return current.baseURL;
  await writeSecretFile(localEdgePath(), local);
  return undefined;
}

/** Reuses the saved development key while it still works; otherwise creates the account or a new key. */
async function ensureDevAccount(adminSecret: string): Promise<LocalEdge> {
  const saved =
    (await readJsonFile(localEdgePathFor(baseURL), LocalEdge)) ?? (await readJsonFile(localEdgePath(), LocalEdge));
  if (saved && saved.baseURL === baseURL) {
    try {
      await new Sextant({ apiKey: saved.apiKey, baseURL }).me();
      return { ...saved, adminSecret };
    } catch (err) {
      if (!(err instanceof AuthenticationError)) throw err;
    }
  }
  const admin = new SextantAdmin({ adminSecret, baseURL });
  let user = await admin.users.findByEmail(DEV_EMAIL);
  if (!user) {
    const org = await admin.orgs.create({ name: "Local development", plan: "business" });
    user = await admin.users.create(org.id, { email: DEV_EMAIL, name: "Local developer", role: "owner" });
  }
  const key = await admin.keys.create({ userId: user.id, name: "local development" });
  return { baseURL, apiKey: key.key, adminSecret };
}

/** A running edge, however it runs. */
interface Running {
  exited: Promise<number>;
  stop(): void;
}

function wranglerDev(vars: string[]): Running {
  const previousUmask = process.umask(0o077);
  const child = spawn(
    "npx",
    [
      "wrangler",
      "dev",
      "--ip",
      args.ip,
      "--port",
      args.port,
      "--persist-to",
      args["persist-to"],
      "--show-interactive-dev-session=false",
      ...vars.flatMap((v) => ["--var", v]),
    ],
    { stdio: ["inherit", "inherit", "inherit"], env: { ...wranglerEnv, CI: process.env.CI ?? "" } },
  );
  // wrangler and its workerd keep the umask they started with (`private-state.ts`).
  process.umask(previousUmask);
  return {
    exited: new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? (signal ? 0 : 1)))),
    stop: () => child.kill("SIGTERM"),
  };
}

async function miniflare(vars: string[]): Promise<Running> {
  const edge = await startEdge({
    host: args.ip,
    port: Number(args.port),
    persistTo: args["persist-to"],
    vars: Object.fromEntries(vars.map((v) => [v.slice(0, v.indexOf(":")), v.slice(v.indexOf(":") + 1)])),
    logRequests: args["log-requests"],
    env: wranglerEnv,
  });
  let done: (code: number) => void = () => {};
  const exited = new Promise<number>((resolve) => (done = resolve));
  let stopping = false;
  return {
    exited,
    stop: () => {
      if (stopping) return;
      stopping = true;
      edge.dispose().then(
        () => done(0),
        () => done(1),
      );
    },
  };
}

/**
 * Which driver runs agent tasks' commands (`local-sandbox.ts`), said on the console; undefined when a
 * sandbox host is named (SANDBOX_URL) or containers are (SANDBOX_HOSTS).
 */
function sandboxChoice(): DriverChoice | undefined {
  if (args.var.some((v) => v.startsWith("SANDBOX_URL:") || v.startsWith("SANDBOX_HOSTS:"))) return undefined;
  let choice: DriverChoice;
  try {
    choice = chooseDriver();
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(2);
  }
  (choice.driver === "bubblewrap" ? console.log : console.warn)(driverBanner(choice));
  return choice;
}

const adminSecret = ensureAdminSecret();
// Before anything writes there: the state holds key hashes and org ids (`private-state.ts`).
makePrivate(args["persist-to"]);
await withPrivateUmask(applyMigrations);
const gateway = await gatewayVars();
const driver = sandboxChoice();
const sandboxes: LocalSandboxHost | undefined = driver?.driver ? await startLocalSandboxHost(driver.driver) : undefined;
// Without a sandbox host, the edge answers task creation with why, and how to fix it.
const sandboxVars = sandboxes?.vars ?? (driver && !driver.driver ? [`SANDBOX_UNAVAILABLE:${driver.refusal}`] : []);
const vars = [...args.var, ...gateway.vars, ...sandboxVars];
let running: Running;
try {
  running = args.dev ? wranglerDev(vars) : await miniflare(vars);
} catch (err) {
  console.error(`Could not start the local edge: ${err instanceof Error ? err.message : String(err)}`);
  await gateway.simulator?.stop();
  await sandboxes?.stop();
  process.exit(1);
}
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => running.stop());
let exitCode: number | undefined;
void running.exited.then(async (code) => {
  exitCode = code;
  await gateway.simulator?.stop();
  await sandboxes?.stop();
  process.exit(code);
});

try {
  await waitForHealth(() => exitCode);
  const other = await saveLocalEdge(await ensureDevAccount(adminSecret));
  console.log(
    `\nSextant edge ready at ${baseURL}\n` +
      (other
        ? `The CLI keeps using the local edge at ${other}, which is still running. To use this one, set\n` +
          `SEXTANT_BASE_URL=${baseURL} (its development key is in ${localEdgePathFor(baseURL)}).\n`
        : `Development key saved to ${localEdgePath()} (the CLI finds it).\n` + `Try: npx sextant whoami\n`) +
      (gateway.simulator
        ? `Model requests go to simulated GPU backends (control: ${gateway.simulator.control}).\n` +
          `Their control API wants Authorization: Bearer ${
            process.env.SIMULATOR_CONTROL_TOKEN ? "$SIMULATOR_CONTROL_TOKEN" : gateway.simulator.controlToken
          } (SIMULATOR_CONTROL_TOKEN sets it).\n` +
          realModelHint(command)
        : gateway.upstream
          ? upstreamLine(gateway.upstream, agentModel(vars))
          : "") +
      (sandboxes ? `Agent tasks run in ${sandboxes.driver} sandboxes (${sandboxes.url}).\n` : "") +
      (driver && driver.driver !== "bubblewrap" ? `${driverBanner(driver)}\n` : "") +
      `Operator dashboard: ${baseURL}/admin/dashboard (sign in with ADMIN_SECRET from .dev.vars).\n`,
  );
} catch (err) {
  console.error(`Could not start the local edge: ${err instanceof Error ? err.message : String(err)}`);
  running.stop();
  process.exitCode = 1;
}
