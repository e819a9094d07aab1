/**
 * `npm run bench:gateway`: the gateway benchmarks at full size, one after another, each on its own
 * local edge. Name some to run only those: `npm run bench:gateway -- overload failover`.
 */
import { pathToFileURL } from "node:url";
import { reportCancel, runCancel } from "./gateway-cancel.js";
import { reportColdStart, runColdStart } from "./gateway-coldstart.js";
import { reportFailover, runFailover } from "./gateway-failover.js";
import { reportOverhead, runOverhead } from "./gateway-overhead.js";
import { reportOverload, runOverload } from "./gateway-overload.js";
import { reportPauses, runPauses } from "./gateway-pauses.js";

export const GATEWAY_BENCHMARKS = {
  overhead: async () => reportOverhead(await runOverhead()),
  pauses: async () => reportPauses(await runPauses()),
  cancel: async () => reportCancel(await runCancel()),
  overload: async () => reportOverload(await runOverload()),
  failover: async () => reportFailover(await runFailover()),
  coldstart: async () => reportColdStart(await runColdStart()),
} as const;

export async function runGatewayBenchmarks(only: string[] = []): Promise<void> {
  const unknown = only.filter((name) => !(name in GATEWAY_BENCHMARKS));
  if (unknown.length)
    throw new Error(
      `unknown gateway benchmark ${unknown.join(", ")}; one of ${Object.keys(GATEWAY_BENCHMARKS).join(", ")}`,
    );
  for (const [name, run] of Object.entries(GATEWAY_BENCHMARKS)) {
    if (only.length && !only.includes(name)) continue;
    const started = performance.now();
    console.log(await run());
    console.log(`(${name}: ${((performance.now() - started) / 1000).toFixed(0)} s, edge start included)\n`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await runGatewayBenchmarks(process.argv.slice(2));
}
