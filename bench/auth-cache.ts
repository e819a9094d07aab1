/**
 * What the per-isolate key cache saves on an authenticated request, against an edge with the cache
 * off (KEY_CACHE_TTL_SECONDS=0: one D1 query per request), and the unauthenticated floor. The two
 * edges run side by side and the three cases take turns in rounds of `block` sequential requests
 * each, the order rotating, so that whatever else the machine does meanwhile falls on each case
 * alike. Within a turn the requests follow each other at once, as they did when the cases ran one
 * after the other; alternating request by request instead would make every request wake an edge
 * that the other case's request had left idle, and time that wake-up as much as the request.
 *
 *   npx tsx bench/auth-cache.ts            # 2,000 sequential requests per case
 *   BENCH_REQUESTS=200 npx tsx bench/auth-cache.ts
 *
 * Local D1 is SQLite in the same process; deployed D1 is a network round trip away, so the
 * saving there is larger than what this measures.
 */
import { pathToFileURL } from "node:url";
import { savedLocalEdge, startLocalEdge, type LocalEdge } from "../test/support/local-edge.js";

export interface Figures {
  p50: number;
  p99: number;
  mean: number;
}

export const CASES = ["GET /healthz (no auth)", "GET /v1/me, key cache on", "GET /v1/me, key cache off"] as const;
export type CaseName = (typeof CASES)[number];

export interface AuthCacheResult {
  requests: number;
  /** Sequential requests in each case's turn. */
  block: number;
  warmup: number;
  /** The cases in the order their timed turns ran. */
  order: CaseName[];
  cases: Record<CaseName, Figures>;
}

const WARMUP = 50;

async function call(url: string, headers: Record<string, string>): Promise<number> {
  const started = performance.now();
  const response = await fetch(url, { headers });
  await response.arrayBuffer();
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return performance.now() - started;
}

function figures(times: number[]): Figures {
  const sorted = [...times].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: sorted.reduce((a, b) => a + b, 0) / sorted.length };
}

export async function runAuthCacheBench(requests: number, block = 50): Promise<AuthCacheResult> {
  const edges: LocalEdge[] = [];
  try {
    const on = await startLocalEdge();
    edges.push(on);
    const off = await startLocalEdge({ vars: { KEY_CACHE_TTL_SECONDS: "0" } });
    edges.push(off);
    const auth = (edge: LocalEdge) => ({ Authorization: `Bearer ${savedLocalEdge(edge).apiKey}` });
    const targets: Record<CaseName, [string, Record<string, string>]> = {
      "GET /healthz (no auth)": [`${on.baseURL}/healthz`, {}],
      "GET /v1/me, key cache on": [`${on.baseURL}/v1/me`, auth(on)],
      "GET /v1/me, key cache off": [`${off.baseURL}/v1/me`, auth(off)],
    };
    const times = Object.fromEntries(CASES.map((c) => [c, [] as number[]])) as Record<CaseName, number[]>;
    const order: CaseName[] = [];
    const warmup = Math.min(WARMUP, requests);
    for (const name of CASES) for (let i = 0; i < warmup; i++) await call(...targets[name]);
    for (let round = 0; round * block < requests; round++) {
      const n = Math.min(block, requests - round * block);
      for (let k = 0; k < CASES.length; k++) {
        const name = CASES[(round + k) % CASES.length]!;
        order.push(name);
        for (let i = 0; i < n; i++) times[name].push(await call(...targets[name]));
      }
    }
    const cases = Object.fromEntries(CASES.map((c) => [c, figures(times[c])])) as Record<CaseName, Figures>;
    return { requests, block, warmup, order, cases };
  } finally {
    await Promise.all(edges.map((e) => e.stop()));
  }
}

export function report(r: AuthCacheResult): string {
  const lines = [
    `auth-cache: ${r.requests} sequential requests per case after ${r.warmup} untimed, the three cases taking turns of ${r.block} requests (order rotating each round), against two local edges run side by side, one with the key cache as configured and one with KEY_CACHE_TTL_SECONDS=0`,
    "case                           p50 ms   p99 ms  mean ms",
  ];
  for (const [name, f] of Object.entries(r.cases)) {
    lines.push(
      `${name.padEnd(30)} ${f.p50.toFixed(2).padStart(7)} ${f.p99.toFixed(2).padStart(8)} ${f.mean.toFixed(2).padStart(8)}`,
    );
  }
  const on = r.cases["GET /v1/me, key cache on"];
  const off = r.cases["GET /v1/me, key cache off"];
  const floor = r.cases["GET /healthz (no auth)"];
  lines.push(
    `cache off / cache on, p50: ${(off.p50 / on.p50).toFixed(2)}x; mean: ${(off.mean / on.mean).toFixed(2)}x`,
    `cache on / no auth, p50: ${(on.p50 / floor.p50).toFixed(2)}x; mean: ${(on.mean / floor.mean).toFixed(2)}x`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(report(await runAuthCacheBench(Number(process.env.BENCH_REQUESTS ?? 2000))));
}
