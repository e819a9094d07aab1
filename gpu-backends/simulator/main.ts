/**
 * The simulator as a process: starts SIMULATED backends and the control server, prints one JSON line
 * `{"control":"http://127.0.0.1:P","controlToken":"…","backends":{"<id>":"http://127.0.0.1:Q/v1"}}`
 * on stdout once they listen, and stops on SIGTERM or SIGINT. The control API wants that token as a
 * bearer token: `SIMULATOR_CONTROL_TOKEN` (an environment variable rather than a flag, which every
 * user of the machine could read in `ps`), else the config file's `control.token`, else one minted
 * for the run. Exit codes: 0 stopped, 2 bad arguments or configuration, 1 anything else (a port in use).
 *
 *   tsx gpu-backends/simulator/main.ts --config backends.json
 *   tsx gpu-backends/simulator/main.ts --id local --port 8100 --ttft-ms 40 --model qwen2.5-coder-7b
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { z } from "zod";
import { loadAgentScripts } from "./agent-script.js";
import { BackendOptions, SimulatorOptions, startSimulator } from "./simulator.js";

const USAGE = `Usage: tsx gpu-backends/simulator/main.ts [--config file.json] [options]

  --config <file>            JSON: {"backends":[BackendOptions…],"control":{"port":N}} or [BackendOptions…]
  --control-port <n>         control server port (default: from the file, else ephemeral)

Without --config, one backend from flags:
  --id <id>                  default "sim"
  --port <n>                 default ephemeral
  --kind <kind>              vllm, openai or anthropic; default vllm
  --model <name>             repeatable; default sim-model
  --ttft-ms <ms>             default 20
  --tokens-per-second <n>    default 200
  --completion-tokens <n>    default 16
  --capacity <n>             default 8
  --max-concurrency <n>      default 2 × capacity
  --api-key <key>            require Authorization: Bearer <key>
  --embedding-dims <n>       default 16
  --agent-scripts <dir>      the scripted agent model's scripts (*.json), for every backend

The control API wants Authorization: Bearer <token>: SIMULATOR_CONTROL_TOKEN (16 characters or
more), else the file's "control":{"token":…}, else a new one. The line printed once listening says it.
`;

const FLAGS = {
  config: { type: "string" },
  "control-port": { type: "string" },
  id: { type: "string" },
  port: { type: "string" },
  kind: { type: "string" },
  model: { type: "string", multiple: true },
  "ttft-ms": { type: "string" },
  "tokens-per-second": { type: "string" },
  "completion-tokens": { type: "string" },
  capacity: { type: "string" },
  "max-concurrency": { type: "string" },
  "api-key": { type: "string" },
  "embedding-dims": { type: "string" },
  "agent-scripts": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** Numeric flags and the option each sets. */
const NUMERIC = {
  port: "port",
  "ttft-ms": "ttftMs",
  "tokens-per-second": "tokensPerSecond",
  "completion-tokens": "completionTokens",
  capacity: "capacity",
  "max-concurrency": "maxConcurrency",
  "embedding-dims": "embeddingDims",
} as const;

/** A config file holds the library's options, or just the list of backends. */
const ConfigFile = z.preprocess((json) => (Array.isArray(json) ? { backends: json } : json), SimulatorOptions);

const issues = (error: z.ZodError) =>
  error.issues.map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`).join("; ");

function number(flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n)) throw new Error(`--${flag} must be a number, not "${value}"`);
  return n;
}

async function options(): Promise<SimulatorOptions & { control: { port?: number; token?: string } }> {
  const { values } = parseArgs({ options: FLAGS, strict: true, allowPositionals: false });
  if (values.help) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  // Loaded before anything listens, so that a bad script is a configuration error (exit code 2).
  const scripts = values["agent-scripts"] === undefined ? undefined : loadAgentScripts(values["agent-scripts"]);
  const withScripts = <T extends object>(b: T) => (scripts ? { ...b, agentScripts: scripts } : b);
  const controlPort = values["control-port"] === undefined ? undefined : number("control-port", values["control-port"]);
  const controlToken = process.env.SIMULATOR_CONTROL_TOKEN || undefined;
  if (controlToken !== undefined && controlToken.length < 16)
    throw new Error("SIMULATOR_CONTROL_TOKEN must be 16 characters or more");
  const flags = {
    ...(controlPort === undefined ? {} : { port: controlPort }),
    ...(controlToken === undefined ? {} : { token: controlToken }),
  };
  if (values.config) {
    const text = await readFile(values.config, "utf8");
    const parsed = ConfigFile.safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`${values.config}: ${issues(parsed.error)}`);
    const control = typeof parsed.data.control === "object" ? parsed.data.control : {};
    return { backends: parsed.data.backends.map(withScripts), control: { ...control, ...flags } };
  }
  const backend: Record<string, unknown> = { id: values.id ?? "sim" };
  for (const [flag, option] of Object.entries(NUMERIC)) {
    const value = values[flag as keyof typeof NUMERIC];
    if (value !== undefined) backend[option] = number(flag, value);
  }
  if (values.kind !== undefined) backend.kind = values.kind;
  if (values.model !== undefined) backend.models = values.model;
  if (values["api-key"] !== undefined) backend.apiKey = values["api-key"];
  const parsed = BackendOptions.safeParse(backend);
  if (!parsed.success) throw new Error(issues(parsed.error));
  return { backends: [withScripts(parsed.data)], control: flags };
}

async function main() {
  let config: Awaited<ReturnType<typeof options>>;
  try {
    config = await options();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`simulator: ${message}\nRun with --help for the options.\n`);
    process.exit(2);
  }
  const sim = await startSimulator(config);
  const backends = Object.fromEntries(sim.backends.map((b) => [b.id, b.url]));
  process.stdout.write(`${JSON.stringify({ control: sim.control, controlToken: sim.controlToken, backends })}\n`);
  const shutdown = (signal: string) => {
    process.stderr.write(`simulator: ${signal}, stopping\n`);
    sim.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`simulator: ${String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.once("SIGTERM", shutdown);
  process.once("SIGINT", shutdown);
}

main().catch((err: unknown) => {
  process.stderr.write(`simulator: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
