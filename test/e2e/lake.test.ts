/**
 * The data pipeline end to end, on a local edge whose lake fails on purpose (`LAKE_FAULT_EVERY`):
 * partition writes that die between writing their file and committing it, and consumer batches
 * redelivered after they were written. The lake must still hold each event exactly once, readable
 * by DuckDB from the files `sextant admin lake export` downloads.
 */
import { mkdtempSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { contentKey, openContent, sealContent, Sextant, SextantAdmin, TabSession } from "../../client/sdk/index.js";
import type { EditorEvent } from "../../protocol/events.js";
import { partitionOf, type LakeTable } from "../../protocol/lake.js";
import { LOCAL_MODELS } from "../../scripts/local-gateway.js";
import { duckQuery } from "../support/duckdb.js";
import { edgeWithCliForSuite, savedLocalEdge } from "../support/local-edge.js";
import { parquetFilesUnder, scanDirectoryFor } from "../support/storage-scan.js";

const HOUR = 3_600_000;

function files(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith(".parquet")) out.push(p);
    }
  };
  walk(dir);
  return out;
}

describe("the lake", { timeout: 600_000 }, () => {
  const suite = edgeWithCliForSuite({ LAKE_FAULT_EVERY: "3" });
  const clients = () => {
    const saved = savedLocalEdge(suite.edge);
    return {
      sextant: new Sextant({ baseURL: saved.baseURL, apiKey: saved.apiKey }),
      admin: new SextantAdmin({ baseURL: saved.baseURL, adminSecret: saved.adminSecret }),
      openai: new OpenAI({ baseURL: `${saved.baseURL}/v1`, apiKey: saved.apiKey, maxRetries: 0 }),
    };
  };

  /** Rows of `table` in the hours of `at`, summed over their manifests. */
  async function lakeRows(admin: SextantAdmin, table: LakeTable, hours: number[]): Promise<number> {
    let rows = 0;
    const days = new Map<string, Set<string>>();
    for (const at of hours) {
      const { day, hour } = partitionOf(table, at);
      days.set(day, (days.get(day) ?? new Set()).add(hour));
    }
    for (const [day, wanted] of days) {
      const { partitions } = await admin.lake.partitions(table, day);
      for (const p of partitions) if (wanted.has(p.hour)) rows += p.rows;
    }
    return rows;
  }

  async function waitFor(check: () => Promise<boolean>, what: string): Promise<void> {
    const deadline = Date.now() + 240_000;
    while (Date.now() < deadline) {
      if (await check()) return;
      await new Promise((r) => setTimeout(r, 500));
    }
    // What the edge said meanwhile: the queue's batches (Miniflare logs one line as each ends) and
    // the consumer's warnings, to tell a batch never delivered from one that never ended.
    const said = suite.edge
      .output()
      .split("\n")
      .filter((line) => /QUEUE|lake|warn|error/i.test(line))
      .slice(-40)
      .join("\n");
    throw new Error(`timed out waiting for ${what}; the edge's queue and lake lines:\n${said}`);
  }

  it("joins a tab session's events to the edge's record of each request", async () => {
    const { sextant, admin, openai } = clients();
    const recorder = sextant.events.recorder({ flushIntervalMs: 200 });
    const session = new TabSession(openai, { events: recorder });
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const completion = await session.complete({
        model: LOCAL_MODELS.tab,
        prompt: `def step_${i}(x):\n    `,
        max_tokens: 8,
      });
      ids.push(completion.id);
      session.shown(completion, { shown_chars: completion.choices[0]!.text.length, latency_ms: 40 });
      if (i < 3) session.accepted(completion, i === 0 ? { accepted_chars: 2, partial: true } : {});
      else session.rejected(completion);
    }
    await recorder.close();
    expect(recorder.refused).toBe(0);
    const now = Date.now();
    await waitFor(async () => (await lakeRows(admin, "editor_events", [now])) >= 12, "the session's events");
    await waitFor(async () => (await lakeRows(admin, "edge_requests", [now])) >= 6, "the edge's records");

    const out = mkdtempSync(join(tmpdir(), "sextant-lake-"));
    const day = new Date(now).toISOString().slice(0, 10);
    const exported = suite.cli(["--json", "admin", "lake", "export", "--day", day, "--out", out]);
    expect(exported.code, exported.stderr).toBe(0);
    const events = `read_parquet('${out}/editor_events/**/*.parquet', hive_partitioning = true)`;
    const requests = `read_parquet('${out}/edge_requests/**/*.parquet', hive_partitioning = true)`;
    const joined = await duckQuery(`
      SELECT e.type, e.accepted_chars, e.partial, r.pool, r.class, r.model, r.served_model, r.checkpoint,
             r.endpoint, r.region, r.ttft_ms, r.total_ms, r.completion_tokens, r.outcome
      FROM ${events} e JOIN ${requests} r USING (request_id)
      WHERE e.session_id = '${session.id}' ORDER BY e.at`);
    expect(joined).toHaveLength(12);
    expect(joined.filter((r) => r.type === "tab.shown")).toHaveLength(6);
    expect(joined.filter((r) => r.type === "tab.accepted")).toHaveLength(3);
    expect(joined.filter((r) => r.type === "tab.rejected")).toHaveLength(3);
    expect(joined.find((r) => r.partial === true)?.accepted_chars).toBe(2);
    for (const row of joined) {
      expect(row).toMatchObject({
        pool: "tab",
        class: "tab",
        model: LOCAL_MODELS.tab,
        served_model: LOCAL_MODELS.tab,
        checkpoint: `${LOCAL_MODELS.tab}@sim`,
        outcome: "completed",
      });
      expect(["sim-us-east", "sim-eu-west"]).toContain(row.endpoint);
      expect(["us-east", "eu-west"]).toContain(row.region);
      expect(row.ttft_ms).toBeGreaterThanOrEqual(0);
      expect(row.total_ms as number).toBeGreaterThanOrEqual(row.ttft_ms as number);
      expect(row.completion_tokens).toBeGreaterThan(0);
    }

    // The CLI: events from a file (one refused, by exit code and name), a day's partitions, compaction now.
    const file = join(out, "events.jsonl");
    writeFileSync(
      file,
      `${JSON.stringify({ type: "chat.feedback", rating: "up", at: now })}\n${JSON.stringify({ type: "chat.feedback", rating: "meh" })}\n`,
    );
    const sent = suite.cli(["events", "send", file]);
    expect(sent.code).toBe(1);
    expect(sent.stdout).toContain("Sent 1 events");
    expect(sent.stderr).toMatch(/Refused event 1 \(.+\): invalid_event: rating/);
    const listed = suite.cli(["--json", "admin", "lake", "ls", "--table", "edge_requests", "--day", day]);
    expect(listed.code, listed.stderr).toBe(0);
    const { partitions } = JSON.parse(listed.stdout) as { partitions: { hour: string; rows: number }[] };
    const hour = partitionOf("edge_requests", now).hour;
    expect(partitions.find((p) => p.hour === hour)!.rows).toBeGreaterThanOrEqual(6);
    const compacted = suite.cli(["admin", "lake", "compact", "--table", "edge_requests", "--day", day, "--hour", hour]);
    expect(compacted.code, compacted.stderr).toBe(0);
    expect(compacted.stdout).toMatch(/(Compacted|is already) .* into 1 file|is already 1 file/);

    // The prompts went through the gateway and their records into the lake; no prompt did.
    expect(parquetFilesUnder(suite.edge.persistTo)).toBeGreaterThan(0);
    expect(await scanDirectoryFor(suite.edge.persistTo, ["def step_0(x)", "def step_5(x)"])).toEqual([]);
  });

  it("keeps 100,000 events exactly once through duplicates and forced redeliveries, compacted to a file per hour", async () => {
    const { sextant, admin } = clients();
    const now = Date.now();
    // Three whole hours in the past, so that no other test's events share their partitions.
    const hours = [now - 10 * HOUR, now - 11 * HOUR, now - 12 * HOUR];
    const unique = 99_000;
    const events: EditorEvent[] = [];
    const types = ["tab.shown", "tab.accepted", "tab.rejected", "tab.ignored"] as const;
    for (let i = 0; i < unique; i++) {
      const base = hours[i % 3]!;
      const start = base - (base % HOUR);
      events.push({
        id: `evt-${i.toString(36).padStart(8, "0")}-${(i * 7919).toString(36)}`,
        type: types[i % 4]!,
        at: start + ((i * 37) % HOUR),
        request_id: `req-${i}`,
        session_id: `session-${i % 50}`,
        model: LOCAL_MODELS.tab,
        language: ["typescript", "python", "go"][i % 3],
      } as EditorEvent);
    }
    // 1% sent twice, in later requests.
    const sent = [...events];
    for (let i = 0; i < unique / 100; i++) sent.splice(((i + 1) * 997) % sent.length, 0, events[(i * 101) % unique]!);
    const malformed = { id: "evt-malformed-1", type: "tab.shown", at: now, prompt: "def secret():" };
    let accepted = 0;
    for (let i = 0; i < sent.length; i += 500) {
      const batch: unknown[] = sent.slice(i, i + 500);
      if (i === 0) batch.splice(3, 0, malformed);
      const answer = await sextant.events.send(batch as EditorEvent[]);
      if (i === 0)
        expect(answer.refused.map((r) => [r.index, r.id, r.code])).toEqual([[3, "evt-malformed-1", "invalid_event"]]);
      else expect(answer.refused).toEqual([]);
      accepted += answer.accepted + answer.duplicates;
    }
    // Every good event sent was taken (repeats within a request counted as duplicates there): the
    // edge passed on every copy, and the lake alone must keep one of each.
    expect(accepted).toBe(sent.length);

    await waitFor(async () => (await lakeRows(admin, "editor_events", hours)) >= unique, "every event in the lake");
    expect(await lakeRows(admin, "editor_events", hours)).toBe(unique);
    // The faults happened: writes that died before their commit, and batches delivered again.
    const log = suite.edge.output();
    expect(log).toContain("injected lake fault");
    expect(log).toContain("lake batch redelivered on purpose");
    // The consumer says each batch it returned, the forced redeliveries among them.
    expect(log).toMatch(
      /"message":"lake batch consumed","queue":"sextant-records","messages":\d+,"partitions":\d+,"failed":\d+,"retried":[1-9]/,
    );
    expect(await scanDirectoryFor(suite.edge.persistTo, ["def secret():"])).toEqual([]);

    for (const at of hours) {
      const { day, hour } = partitionOf("editor_events", at);
      await admin.lake.compact({ table: "editor_events", day, hour });
    }
    const out = mkdtempSync(join(tmpdir(), "sextant-lake-"));
    for (const at of new Set(hours.map((h) => new Date(h).toISOString().slice(0, 10)))) {
      const exported = suite.cli(["admin", "lake", "export", "--table", "editor_events", "--day", at, "--out", out]);
      expect(exported.code, exported.stderr).toBe(0);
    }
    const wanted = new Set(hours.map((h) => partitionOf("editor_events", h)).map((p) => `${p.day}/${p.hour}`));
    const parquet = files(out).filter((f) => {
      const m = /day=([\d-]+)\/hour=(\d\d)\//.exec(f);
      return m && wanted.has(`${m[1]}/${m[2]}`);
    });
    expect(parquet).toHaveLength(3);

    const list = `[${parquet.map((f) => `'${f}'`).join(",")}]`;
    const [counts] = await duckQuery(
      `SELECT count(*) AS n, count(DISTINCT event_id) AS ids FROM read_parquet(${list}, hive_partitioning = true)`,
    );
    expect(counts).toEqual({ n: unique, ids: unique });
    const [{ missing }] = (await duckQuery(
      `SELECT count(*) AS missing FROM (VALUES ${events
        .slice(0, 2_000)
        .map((e) => `('${e.id}')`)
        .join(",")}) AS t(id) WHERE id NOT IN (SELECT event_id FROM read_parquet(${list}))`,
    )) as [{ missing: number }];
    expect(missing).toBe(0);

    // Parquet against the same rows as JSON lines.
    const rows = await duckQuery(`SELECT * FROM read_parquet(${list})`);
    // As JSON lines of only the fields each row has (no nulls): the smaller JSON to compare with.
    const json = rows.reduce(
      (n, r) => n + Buffer.byteLength(JSON.stringify(r, (_k, v: unknown) => (v === null ? undefined : v))) + 1,
      0,
    );
    const bytes = parquet.reduce((n, f) => n + statSync(f).size, 0);
    expect(json / bytes).toBeGreaterThanOrEqual(5);
  });

  it("keeps an opted-in org's content only sealed: the org opens it from the export, storage never holds the text", async () => {
    const { sextant } = clients();
    const me = await sextant.me();
    const opted = suite.cli(["--json", "admin", "orgs", "set-event-content", me.org.id, "sealed"]);
    expect(opted.code, opted.stderr).toBe(0);
    expect(JSON.parse(opted.stdout).eventContent).toBe("sealed");
    const key = await contentKey(crypto.getRandomValues(new Uint8Array(32)));
    const text = "function secretSauceRecipe(ingredients) { return ingredients.sort(); }";
    const at = Date.now() - 14 * HOUR;
    const event = {
      id: crypto.randomUUID(),
      type: "tab.accepted",
      at,
      content: await sealContent(text, key, "acme-2026"),
    };
    const answer = await sextant.events.send([event as EditorEvent]);
    expect(answer).toEqual({ accepted: 1, duplicates: 0, refused: [] });

    const { admin } = clients();
    await waitFor(async () => (await lakeRows(admin, "editor_events", [at])) >= 1, "the sealed event");
    const out = mkdtempSync(join(tmpdir(), "sextant-lake-"));
    const { day, hour } = partitionOf("editor_events", at);
    const exported = suite.cli([
      "admin",
      "lake",
      "export",
      "--table",
      "editor_events",
      "--day",
      day,
      "--hour",
      hour,
      "--out",
      out,
    ]);
    expect(exported.code, exported.stderr).toBe(0);
    const [row] = await duckQuery(
      `SELECT content, content_key_id FROM read_parquet('${out}/editor_events/**/*.parquet') WHERE event_id = '${event.id}'`,
    );
    expect(row!.content_key_id).toBe("acme-2026");
    expect(await openContent(row!.content as string, key, "acme-2026")).toBe(text);
    expect(await scanDirectoryFor(suite.edge.persistTo, ["secretSauceRecipe", text])).toEqual([]);
    expect(suite.edge.output()).not.toContain("secretSauceRecipe");
  });
});
