/**
 * What the per-isolate key cache saves on an authenticated request, against the same edge with the
 * cache off (KEY_CACHE_TTL_SECONDS=0: one D1 query per request), measured in the same run.
 *
 *   npx tsx bench/auth-cache.ts            # 2,000 sequential requests per case
 *   BENCH_REQUESTS=200 npx tsx bench/auth-cache.ts
 *
 * Local D1 is SQLite in the same process; deployed D1 is a network round trip away, so the
 * saving there is larger than what this measures.
 */
import { pathToFileURL } from "node:url";
import { readJsonFile, LocalEdge, localEdgePath } from "../client/cli/credentials.js";
import { startLocalEdge } from "../test/support/local-edge.js";

export interface Figures {
  p50: number;
  p99: number;
  mean: number;
}

async function measure(url: string, headers: Record<string, string>, requests: number): Promise<Figures> {
  for (let i = 0; i < Math.min(50, requests); i++) await (await fetch(url, { headers })).arrayBuffer();
  const times: number[] = [];
  for (let i = 0; i < requests; i++) {
    const started = performance.now();
    const response = await fetch(url, { headers });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`${url} answered ${response.status}`);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: times.reduce((a, b) => a + b, 0) / times.length };
}

export async function runAuthCacheBench(requests: number): Promise<Record<string, Figures>> {
  const results: Record<string, Figures> = {};
  let edge = await startLocalEdge();
  try {
    process.env.SEXTANT_CONFIG_DIR = edge.configDir;
    const local = await readJsonFile(localEdgePath(), LocalEdge);
    if (!local) throw new Error("npm start did not register a development key");
    const auth = { Authorization: `Bearer ${local.apiKey}` };
    results["GET /healthz (no auth)"] = await measure(`${edge.baseURL}/healthz`, {}, requests);
    results["GET /v1/me, key cache on"] = await measure(`${edge.baseURL}/v1/me`, auth, requests);
    const port = Number(new URL(edge.baseURL).port);
    await edge.stop();
    edge = await startLocalEdge({
      port,
      configDir: edge.configDir,
      persistTo: edge.persistTo,
      vars: { KEY_CACHE_TTL_SECONDS: "0" },
    });
    results["GET /v1/me, key cache off"] = await measure(`${edge.baseURL}/v1/me`, auth, requests);
  } finally {
    await edge.stop();
  }
  return results;
}

export function report(results: Record<string, Figures>): string {
  const lines = ["case                           p50 ms   p99 ms  mean ms"];
  for (const [name, f] of Object.entries(results)) {
    lines.push(
      `${name.padEnd(30)} ${f.p50.toFixed(2).padStart(7)} ${f.p99.toFixed(2).padStart(8)} ${f.mean.toFixed(2).padStart(8)}`,
    );
  }
  const on = results["GET /v1/me, key cache on"];
  const off = results["GET /v1/me, key cache off"];
  if (on && off)
    lines.push(
      `cache off / cache on, p50: ${(off.p50 / on.p50).toFixed(2)}x; mean: ${(off.mean / on.mean).toFixed(2)}x`,
    );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const requests = Number(process.env.BENCH_REQUESTS ?? 2000);
  console.log(`auth-cache: ${requests} sequential requests per case against the local edge\n`);
  console.log(report(await runAuthCacheBench(requests)));
}
