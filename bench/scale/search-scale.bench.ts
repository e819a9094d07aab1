import { env } from "cloudflare:test";
import { expect, it } from "vitest";
import type { IndexedChunk } from "../../durable-objects/workspace.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type { CommitResponse, SearchResponse } from "../../protocol/sync.js";
import { quantile } from "../stats.js";

/**
 * Search latency at a number of chunks: synthetic unit vectors of 512 dimensions and Zipf-like
 * keyed terms, committed through the Workspace object's RPC in batches of 2,000 files of 5
 * chunks, then `SCALE_QUERIES` warm searches (vector + 8 terms, top 10) timed around the RPC.
 */
const DIMS = 512;
const VOCABULARY = 200_000;

function random(seed: number) {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

function unitVector(next: () => number): Float32Array {
  const v = new Float32Array(DIMS);
  let norm = 0;
  for (let i = 0; i < DIMS; i++) {
    // Sum of uniforms: near enough Gaussian for a random direction.
    const x = next() + next() + next() - 1.5;
    v[i] = x;
    norm += x * x;
  }
  norm = Math.sqrt(norm);
  for (let i = 0; i < DIMS; i++) v[i]! /= norm;
  return v;
}

const zipfTerm = (next: () => number) => Math.floor(VOCABULARY ** next()) >>> 0;
const segment = (prefix: string, n: number) => `${prefix}${n.toString(36)}`.padEnd(43, "A");
const hex = (n: number) => n.toString(16).padStart(64, "0");

it("measures search latency at each scale point", async () => {
  const settings = env as unknown as { SCALE_POINTS: string; SCALE_QUERIES: string };
  const points = settings.SCALE_POINTS.split(",").map(Number);
  const queries = Number(settings.SCALE_QUERIES);
  const lines: string[] = [];
  for (const n of points) {
    const stub = workspaceStub(env, `scale-${n}-${Date.now()}`);
    await stub.init({ workspaceId: `ws_scale${n}`, orgId: "org_bench", createdAt: new Date().toISOString() });
    const next = random(n);
    const files = Math.ceil(n / 5);
    const started = Date.now();
    for (let f0 = 0; f0 < files; f0 += 2000) {
      const upserts = [];
      const chunks: IndexedChunk[] = [];
      for (let f = f0; f < Math.min(files, f0 + 2000); f++) {
        const path = `${segment("d", f % 100)}/${segment("f", f)}`;
        upserts.push({ path, hash: hex(f + 1), size: 1000 });
        for (let c = 0; c < 5 && f * 5 + c < n; c++) {
          const terms = new Map<number, number>();
          for (let t = 0; t < 30; t++) {
            const id = zipfTerm(next);
            terms.set(id, (terms.get(id) ?? 0) + 1);
          }
          chunks.push({
            path,
            chunkId: hex(f * 5 + c + 1),
            startLine: c * 20 + 1,
            endLine: c * 20 + 20,
            language: "typescript",
            vector: unitVector(next),
            terms: { ids: Uint32Array.from(terms.keys()), counts: Uint16Array.from(terms.values()) },
          });
        }
      }
      const result = (await stub.commit({ upserts, deletes: [] }, chunks)) as CommitResponse;
      expect(result.applied).toBe(upserts.length);
    }
    const loadMs = Date.now() - started;
    const ask = async () => {
      const t0 = performance.now();
      const answer = (await stub.search({
        vector: unitVector(next),
        terms: Array.from({ length: 8 }, () => zipfTerm(next)),
        topK: 10,
      })) as SearchResponse;
      const ms = performance.now() - t0;
      expect(answer.results.length).toBe(10);
      return ms;
    };
    const coldMs = await ask();
    for (let i = 0; i < 10; i++) await ask();
    const times: number[] = [];
    for (let i = 0; i < queries; i++) times.push(await ask());
    const stats = (await stub.indexStats())!;
    lines.push(
      [
        `${n.toLocaleString("en-US")} chunks`,
        `p50 ${quantile(times, 0.5).toFixed(1)} ms`,
        `p95 ${quantile(times, 0.95).toFixed(1)} ms`,
        `p99 ${quantile(times, 0.99).toFixed(1)} ms`,
        `max ${Math.max(...times).toFixed(1)} ms`,
        `first query ${coldMs.toFixed(0)} ms`,
        `index memory ${((stats.backend?.hotBytes ?? 0) / 2 ** 20).toFixed(1)} MiB`,
        `vectors ${stats.backend?.exact ? "int8, exact" : "1-bit estimate"}`,
        `${stats.backend?.segments} segments, ${((stats.backend?.segmentBytes ?? 0) / 2 ** 20).toFixed(0)} MiB on R2`,
        `loaded in ${(loadMs / 1000).toFixed(1)} s`,
      ].join(" | "),
    );
    console.log(lines.at(-1));
    await stub.destroy();
  }
  console.log(`\nSearch latency (${queries} warm queries each, top 10, hybrid):\n${lines.join("\n")}`);
});
