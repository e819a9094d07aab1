/**
 * Read-only tool calls side by side, at the sandbox host's own API: four `grep`s over 2,000 files
 * sent at once, against the slowest of the same four sent one at a time, in rounds. This is the
 * host's part of what `bench/agents.ts` measures through the whole edge, without the edge, so that it
 * runs where only Node is (a bundle: `npx esbuild sandboxes/bench-parallel.ts --bundle --platform=node
 * --format=esm --outfile=bench-parallel.mjs`).
 *
 *   npx tsx sandboxes/bench-parallel.ts [rounds]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxHost } from "./host.js";

const rounds = Number(process.argv[2] ?? 7);
const WORDS = ["alpha", "beta", "gamma", "delta"];
const FILES = 2000;
const LINES = 200;

const root = mkdtempSync(join(tmpdir(), "sextant-bench-parallel-"));
const token = `bench-${crypto.randomUUID()}`;
const host = await startSandboxHost({ token, root, driver: "direct" });

async function api(method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await fetch(`${host.url}/v1/sandboxes${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const json = (await response.json()) as unknown;
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

const id = "bench-parallel";
await api("POST", "", { id });
const line = (n: number) => `${WORDS.join(" ")} ${n}`;
const content = Buffer.from(Array.from({ length: LINES }, (_, i) => line(i + 1)).join("\n") + "\n").toString("base64");
for (let start = 0; start < FILES; start += 500) {
  const files = Array.from({ length: Math.min(500, FILES - start) }, (_, i) => ({
    path: `data/f${start + i}.txt`,
    content,
  }));
  await api("POST", `/${id}/files`, { files });
}

let call = 0;
/** One grep call's time as the host answers it (HTTP round trip included), in ms. */
async function grep(word: string): Promise<number> {
  const started = performance.now();
  const outcome = (await api("POST", `/${id}/calls/c${call++}`, {
    tool: "grep",
    args: { pattern: `${word}[0-9]+x`, path: "data" },
  })) as { ok: boolean };
  if (!outcome.ok) throw new Error(`grep failed: ${JSON.stringify(outcome)}`);
  return performance.now() - started;
}

const together: number[] = [];
const slowestAlone: number[] = [];
// Warms the page cache and every worker of the pool (the first scans of each run cold code).
for (let i = 0; i < 3; i++) await Promise.all(WORDS.map(grep));
for (let r = 0; r < rounds; r++) {
  const alone: number[] = [];
  for (const word of WORDS) alone.push(await grep(word));
  const started = performance.now();
  await Promise.all(WORDS.map(grep));
  together.push(performance.now() - started);
  slowestAlone.push(Math.max(...alone));
}
await host.stop();
rmSync(root, { recursive: true, force: true });

const ratios = together.map((t, i) => t / slowestAlone[i]!);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(", ");
console.log(
  `machine: ${availableParallelism()} cores (${cpus()[0]?.model.trim() ?? "unknown"}), Node ${process.version}`,
);
console.log(
  `four greps over ${FILES} files at once vs the slowest alone: median ${median(ratios).toFixed(2)}x ` +
    `(rounds: ${ratios.map((x) => `${x.toFixed(2)}x`).join(", ")}; target <= 1.3x)`,
);
console.log(`  together ${fmt(together)} ms; slowest alone ${fmt(slowestAlone)} ms`);
