/**
 * The agent benchmark's other services as processes of their own, as they run in production (GPU
 * backends and sandbox hosts are other machines): a sandbox host (`sandboxes/main.ts`) and one
 * simulator process per simulated backend (`gpu-backends/simulator/main.ts`), instead of both inside
 * `npm start`'s one Node process, where their work would queue behind each other on one thread.
 * `SEXTANT_BUNDLES` names a directory of esbuild bundles (`sandbox-host.mjs`, `simulator.mjs`) to run
 * with this Node where there is no tsx (bench/device/).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { AgentScript } from "../gpu-backends/simulator/agent-script.js";
import { LOCAL_BACKENDS, localGatewayConfig } from "../scripts/local-gateway.js";
import { chooseDriver } from "../scripts/local-sandbox.js";

export interface AgentProcesses {
  /** `--var`s for `npm start`: the gateway's backends and the sandbox host. */
  vars: Record<string, string>;
  driver: string;
  setScripts(scripts: AgentScript[]): Promise<void>;
  stop(): Promise<void>;
}

function launch(script: string, bundle: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const bundles = process.env.SEXTANT_BUNDLES;
  const [command, ...prefix] = bundles ? [process.execPath, join(bundles, bundle)] : ["npx", "tsx", script];
  // A group of its own: `npx tsx` is a tree of processes, and all of it is stopped together.
  return spawn(command!, [...prefix, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
    detached: true,
  });
}

/** The first line a process prints, as JSON. */
async function firstLine<T>(child: ChildProcess, what: string): Promise<T> {
  const lines = createInterface({ input: child.stdout! });
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code) => reject(new Error(`${what} exited ${code} before it listened`))),
  );
  const first = new Promise<string>((resolve) => lines.once("line", resolve));
  return JSON.parse(await Promise.race([first, exited])) as T;
}

export async function startAgentProcesses(): Promise<AgentProcesses> {
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((resolve) => {
            // "close": every process of the group that held its output has gone.
            if (c.stdout?.closed) return resolve();
            c.once("close", () => resolve());
            try {
              process.kill(-c.pid!, "SIGTERM");
            } catch {
              resolve();
            }
          }),
      ),
    );
  };
  try {
    const token = `bench-${crypto.randomUUID()}`;
    // As `npm start` chooses: bubblewrap, or `direct` only when SEXTANT_SANDBOX_DRIVER names it.
    const choice = chooseDriver();
    if (!choice.driver) throw new Error(choice.refusal);
    const driver = choice.driver;
    const host = launch("sandboxes/main.ts", "sandbox-host.mjs", ["--port", "0", "--driver", driver], {
      SANDBOX_TOKEN: token,
    });
    children.push(host);
    const dir = mkdtempSync(join(tmpdir(), "sextant-bench-sims-"));
    const sims = LOCAL_BACKENDS.map((backend) => {
      const config = join(dir, `${backend.id}.json`);
      writeFileSync(config, JSON.stringify({ backends: [backend], control: { port: 0 } }));
      const child = launch("gpu-backends/simulator/main.ts", "simulator.mjs", ["--config", config]);
      children.push(child);
      return firstLine<{ control: string; controlToken: string; backends: Record<string, string> }>(
        child,
        `simulator ${backend.id}`,
      );
    });
    const { url } = await firstLine<{ url: string }>(host, "sandbox host");
    const started = await Promise.all(sims);
    const urls = Object.assign({}, ...started.map((s) => s.backends)) as Record<string, string>;
    return {
      vars: { GATEWAY_CONFIG: JSON.stringify(localGatewayConfig(urls)), SANDBOX_URL: url, SANDBOX_TOKEN: token },
      driver,
      async setScripts(scripts) {
        for (const sim of started)
          for (const id of Object.keys(sim.backends)) {
            const r = await fetch(`${sim.control}/backends/${id}/agent-scripts`, {
              method: "PUT",
              headers: { Authorization: `Bearer ${sim.controlToken}`, "Content-Type": "application/json" },
              body: JSON.stringify({ scripts }),
            });
            if (!r.ok) throw new Error(`setting ${id}'s scripts: ${r.status} ${await r.text()}`);
          }
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
