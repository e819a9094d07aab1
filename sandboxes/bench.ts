/**
 * What a sandboxed command costs: the time to run `true` under each driver, and how long past its
 * deadline a command that ignores it (with a child of its own) lives. Run as root or not:
 *
 *   npx tsx sandboxes/bench.ts [runs]
 */
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxLimits } from "../protocol/agents/sandbox.js";
import { DRIVERS, DRIVER_NAMES } from "./drivers.js";

const runs = Number(process.argv[2] ?? 20);
const limits = SandboxLimits.parse({});
const tree = mkdtempSync(join(tmpdir(), "sextant-sandbox-bench-"));
const uid = 299_999;
if (process.getuid?.() === 0) chownSync(tree, uid, uid);

const stats = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(1);
  return `median ${at(0.5)} ms, p90 ${at(0.9)} ms, min ${sorted[0]!.toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms`;
};

for (const name of DRIVER_NAMES) {
  const driver = DRIVERS[name];
  const run = (command: string, timeoutMs: number) => driver.run({ tree, command, timeoutMs, limits, uid });
  const probe = await run("true", 10_000).catch((err: Error) => err);
  if (probe instanceof Error || probe.exitCode !== 0) {
    console.log(`${name}: cannot run here (${probe instanceof Error ? probe.message : probe.stderr.trim()})`);
    continue;
  }
  const trueMs: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await run("true", 10_000);
    trueMs.push(performance.now() - started);
  }
  const overMs: number[] = [];
  for (let i = 0; i < Math.min(runs, 10); i++) {
    const r = await run("sleep 60 & sleep 60", 200);
    overMs.push(r.durationMs - 200);
  }
  console.log(`${name}: \`true\` ${stats(trueMs)} (${runs} runs)`);
  console.log(`${name}: killed past a 200 ms timeout by ${stats(overMs)} (${overMs.length} runs)`);
}
rmSync(tree, { recursive: true, force: true });
