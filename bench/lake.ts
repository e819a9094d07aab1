/**
 * The data pipeline on a local edge: what a 100-event `POST /v1/events` costs against `GET /v1/me`
 * measured in the same run, how long an event takes to be queryable in the lake, the edge's CPU per
 * 1,000 events end to end (ingest, queue, partition writes), the Parquet writer's own cost per
 * 1,000 rows, and the lake's size after compaction against the same rows as JSON lines.
 *
 *   npx tsx bench/lake.ts                        # 100,000 events in 1,000 requests
 *   BENCH_LAKE_EVENTS=10000 npx tsx bench/lake.ts
 */
import { pathToFileURL } from "node:url";
import { parquetReadObjects } from "hyparquet";
import { SextantAdmin } from "../client/sdk/index.js";
import { encodeRows } from "../durable-objects/lake/parquet.js";
import type { EditorEvent } from "../protocol/events.js";
import { partitionOf, type LakeRow } from "../protocol/lake.js";
import { savedLocalEdge, startLocalEdge } from "../test/support/local-edge.js";
import { fmt, median, quantile, quantileInterval } from "./stats.js";

const HOUR = 3_600_000;
const BATCH = 100;

export interface LakeBench {
  events: number;
  meP50: number;
  meP95: number;
  ingestP50: number;
  ingestP95: number;
  ingestP95Interval: { lo: number; hi: number };
  freshnessMs: number[];
  edgeCpuMsPer1000: number | undefined;
  encodeMsPer1000: number;
  /** Files of the benchmark's one table-hour after compaction. */
  files: number;
  /** GET /admin/dashboard/data over the benchmark's day, median. */
  dashboardMs: number;
  parquetBytes: number;
  jsonBytes: number;
}

function syntheticEvent(i: number, hourStart: number): EditorEvent {
  const types = ["tab.shown", "tab.shown", "tab.accepted", "tab.rejected", "tab.ignored"] as const;
  return {
    id: `bench-${hourStart.toString(36)}-${i.toString(36).padStart(7, "0")}`,
    type: types[i % types.length]!,
    at: hourStart + ((i * 7_919) % HOUR),
    request_id: `req-${(i >> 1).toString(36)}`,
    session_id: `session-${i % 200}`,
    model: "tab-simulated",
    language: ["typescript", "python", "go", "rust"][i % 4],
    client: "vscode/1.96",
    ...(i % types.length < 2 ? { shown_chars: 20 + (i % 60), latency_ms: 40 + (i % 90) } : {}),
  } as EditorEvent;
}

async function timedFetch(url: string, init: RequestInit): Promise<number> {
  const started = performance.now();
  const response = await fetch(url, init);
  await response.arrayBuffer();
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return performance.now() - started;
}

async function rowsIn(admin: SextantAdmin, at: number): Promise<number> {
  const { day, hour } = partitionOf("editor_events", at);
  const { partitions } = await admin.lake.partitions("editor_events", day);
  return partitions.find((p) => p.hour === hour)?.rows ?? 0;
}

async function until(check: () => Promise<boolean>, what: string, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function runLakeBench(events: number, freshnessSamples: number): Promise<LakeBench> {
  const edge = await startLocalEdge();
  try {
    const saved = savedLocalEdge(edge);
    const admin = new SextantAdmin({ baseURL: saved.baseURL, adminSecret: saved.adminSecret });
    const auth = { Authorization: `Bearer ${saved.apiKey}` };
    const json = { ...auth, "Content-Type": "application/json" };
    const requests = Math.ceil(events / BATCH);
    // Two hours in the past: a partition of the benchmark's own.
    const hourStart = Math.floor((Date.now() - 2 * HOUR) / HOUR) * HOUR;
    const all = Array.from({ length: requests * BATCH }, (_, i) => syntheticEvent(i, hourStart));

    // Warm both routes, then alternate them so that both see the same machine.
    for (let i = 0; i < 20; i++) await timedFetch(`${edge.baseURL}/v1/me`, { headers: auth });
    const warm = all.slice(0, BATCH).map((e) => ({ ...e, id: `${e.id}-warm` }));
    await timedFetch(`${edge.baseURL}/v1/events`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ events: warm }),
    });
    await until(async () => (await rowsIn(admin, hourStart)) >= BATCH, "the warm-up batch");

    const cpuBefore = edge.cpuSeconds();
    const me: number[] = [];
    const ingest: number[] = [];
    for (let r = 0; r < requests; r++) {
      me.push(await timedFetch(`${edge.baseURL}/v1/me`, { headers: auth }));
      const body = JSON.stringify({ events: all.slice(r * BATCH, (r + 1) * BATCH) });
      ingest.push(await timedFetch(`${edge.baseURL}/v1/events`, { method: "POST", headers: json, body }));
    }
    await until(async () => (await rowsIn(admin, hourStart)) >= all.length + BATCH, "every event in the lake");
    const cpuAfter = edge.cpuSeconds();
    // The baseline's own share of that CPU, taken out below: the same number of GET /v1/me alone.
    const meCpuBefore = edge.cpuSeconds();
    for (let r = 0; r < requests; r++) await timedFetch(`${edge.baseURL}/v1/me`, { headers: auth });
    const meCpu = (edge.cpuSeconds() ?? 0) - (meCpuBefore ?? 0);

    // Freshness: one event at a time, from its 202 to its row in the lake's manifest.
    const freshnessMs: number[] = [];
    const freshHour = hourStart - HOUR;
    for (let s = 0; s < freshnessSamples; s++) {
      const before = await rowsIn(admin, freshHour);
      const event = syntheticEvent(s, freshHour);
      const sent = performance.now();
      await timedFetch(`${edge.baseURL}/v1/events`, {
        method: "POST",
        headers: json,
        body: JSON.stringify({ events: [event] }),
      });
      await until(async () => (await rowsIn(admin, freshHour)) > before, "a fresh event", 180_000);
      freshnessMs.push(performance.now() - sent);
    }

    // Compaction, then the lake's bytes against the same rows as JSON lines.
    const { day, hour } = partitionOf("editor_events", hourStart);
    await admin.lake.compact({ table: "editor_events", day, hour });
    const { partitions } = await admin.lake.partitions("editor_events", day);
    const partition = partitions.find((p) => p.hour === hour)!;
    let parquetBytes = 0;
    let jsonBytes = 0;
    for (const file of partition.files) {
      const bytes = await admin.lake.file(file.key);
      parquetBytes += bytes.byteLength;
      const rows = await parquetReadObjects({
        file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer,
      });
      // As a JSON line of only the fields the row has (no nulls): the smaller JSON to compare with.
      for (const row of rows)
        jsonBytes += Buffer.byteLength(JSON.stringify(row, (_k, v: unknown) => (v === null ? undefined : v))) + 1;
    }

    // The dashboard reads the day's files on each load: its data route, over this day (median of 5).
    const dashboard: number[] = [];
    for (let i = 0; i < 5; i++)
      dashboard.push(
        await timedFetch(`${edge.baseURL}/admin/dashboard/data?day=${day}`, {
          headers: { Authorization: `Bearer ${saved.adminSecret}` },
        }),
      );

    // The partition object's own work per 1,000 rows: encoding them as Parquet (in Node's V8).
    const sample = all
      .slice(0, 1000)
      .map((e) => ({ ...e, event_id: e.id, org_id: "org_x", received_at: Date.now() }) as unknown as LakeRow);
    for (let i = 0; i < 5; i++) encodeRows("editor_events", sample);
    const encodes: number[] = [];
    for (let i = 0; i < 30; i++) {
      const started = performance.now();
      encodeRows("editor_events", sample);
      encodes.push(performance.now() - started);
    }

    return {
      events: all.length,
      meP50: median(me),
      meP95: quantile(me, 0.95),
      ingestP50: median(ingest),
      ingestP95: quantile(ingest, 0.95),
      ingestP95Interval: quantileInterval(ingest, 0.95),
      freshnessMs,
      edgeCpuMsPer1000:
        cpuBefore !== undefined && cpuAfter !== undefined
          ? ((cpuAfter - cpuBefore - meCpu) * 1000 * 1000) / all.length
          : undefined,
      encodeMsPer1000: median(encodes),
      files: partition.files.length,
      dashboardMs: median(dashboard),
      parquetBytes,
      jsonBytes,
    };
  } finally {
    await edge.stop();
  }
}

export function reportLake(r: LakeBench): string {
  const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
  return [
    `lake: ${r.events.toLocaleString("en-US")} events in ${r.events / BATCH} requests of ${BATCH}, against the local edge`,
    `POST /v1/events (100 events)  p50 ${fmt(r.ingestP50)} ms  p95 ${fmt(r.ingestP95)} ms (95% CI ${fmt(r.ingestP95Interval.lo)}-${fmt(r.ingestP95Interval.hi)})`,
    `GET /v1/me (same run)         p50 ${fmt(r.meP50)} ms  p95 ${fmt(r.meP95)} ms`,
    `ingest / me, p95: ${(r.ingestP95 / r.meP95).toFixed(2)}x`,
    `freshness (202 to a row in the lake): ${r.freshnessMs.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(", ")}; max ${(Math.max(...r.freshnessMs) / 1000).toFixed(1)} s`,
    `edge CPU per 1,000 events, ingest to lake: ${r.edgeCpuMsPer1000 === undefined ? "n/a (no /proc)" : `${r.edgeCpuMsPer1000.toFixed(1)} ms`}`,
    `Parquet encode per 1,000 rows (Node): ${r.encodeMsPer1000.toFixed(2)} ms`,
    `dashboard data over the day (${r.events.toLocaleString("en-US")} events): median ${fmt(r.dashboardMs)} ms`,
    `after compaction: ${r.files} file${r.files === 1 ? "" : "s"} for 1 table-hour; ${kib(r.parquetBytes)} Parquet vs ${kib(r.jsonBytes)} as JSON lines: ${(r.jsonBytes / r.parquetBytes).toFixed(1)}x smaller`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const events = Number(process.env.BENCH_LAKE_EVENTS ?? 100_000);
  console.log(reportLake(await runLakeBench(events, Number(process.env.BENCH_LAKE_FRESHNESS ?? 5))));
}
