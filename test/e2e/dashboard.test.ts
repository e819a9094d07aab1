/**
 * The operator's dashboard in headless Chromium (Debian's `chromium`), against a local edge with
 * real traffic: tab completions and their events, and refused requests. Its figures must equal what
 * DuckDB computes from the lake's Parquet files, and its charts must be drawn.
 */
import { existsSync, writeFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Sextant, SextantAdmin, TabSession } from "../../client/sdk/index.js";
import { partitionOf, type LakeTable } from "../../protocol/lake.js";
import { LOCAL_MODELS } from "../../scripts/local-gateway.js";
import type { DashboardData } from "../../protocol/dashboard.js";
import { duckQuery } from "../support/duckdb.js";
import { edgeWithCliForSuite, ROOMY_LIMITS, savedLocalEdge } from "../support/local-edge.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SHOWN = 20;
const ACCEPTED = 7;

if (!existsSync(CHROMIUM))
  console.warn(`SKIPPED: the dashboard's browser tests need Chromium at ${CHROMIUM} (apt-get install chromium).`);

/** The roomy limits, but the embeddings of the business plan (the development account's) at 1 a minute. */
function limits(): string {
  const config = JSON.parse(ROOMY_LIMITS);
  config.plans.business.embed = { key: { requests: { limit: 1, windowSeconds: 60 } } };
  return JSON.stringify(config);
}

/** The dashboard's series colours, in order (page.html's COLORS). */
const SERIES: [number, number, number][] = [
  [0x09, 0x69, 0xda],
  [0xcf, 0x22, 0x2e],
  [0x1a, 0x7f, 0x37],
  [0x82, 0x50, 0xdf],
];

/** Pixels of `png` within 40 of one of `colours` on each channel, counted by Chromium itself. */
async function pixelsOf(page: Page, png: Buffer, colours: [number, number, number][]): Promise<number> {
  return page.evaluate(
    async ({ b64, colours }) => {
      const image = new Image();
      image.src = `data:image/png;base64,${b64}`;
      await image.decode();
      const canvas = document.createElement("canvas");
      canvas.width = image.width;
      canvas.height = image.height;
      const ctx = canvas.getContext("2d")!;
      ctx.drawImage(image, 0, 0);
      const { data } = ctx.getImageData(0, 0, image.width, image.height);
      let n = 0;
      for (let i = 0; i < data.length; i += 4)
        if (
          colours.some(
            ([r, g, b]) =>
              Math.abs(data[i]! - r) < 40 && Math.abs(data[i + 1]! - g) < 40 && Math.abs(data[i + 2]! - b) < 40,
          )
        )
          n += 1;
      return n;
    },
    { b64: png.toString("base64"), colours },
  );
}

describe.skipIf(!existsSync(CHROMIUM))("the operator's dashboard", { timeout: 300_000 }, () => {
  const suite = edgeWithCliForSuite({ RATE_LIMITS: limits() });
  let browser: Browser;
  let data: DashboardData;
  let day: string;
  let lakeDir: string;

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
    const saved = savedLocalEdge(suite.edge);
    const sextant = new Sextant({ baseURL: saved.baseURL, apiKey: saved.apiKey, maxRetries: 0 });
    const admin = new SextantAdmin({ baseURL: saved.baseURL, adminSecret: saved.adminSecret });
    const openai = new OpenAI({ baseURL: `${saved.baseURL}/v1`, apiKey: saved.apiKey, maxRetries: 0 });
    const recorder = sextant.events.recorder({ flushIntervalMs: 200 });
    const session = new TabSession(openai, { events: recorder });
    for (let i = 0; i < SHOWN; i++) {
      const completion = await session.complete({
        model: LOCAL_MODELS.tab,
        prompt: `x${i} = `,
        max_tokens: 4 + (i % 5),
      });
      session.shown(completion);
      if (i < ACCEPTED) session.accepted(completion);
      else session.rejected(completion);
    }
    await recorder.close();
    // Embeddings past their limit of one a minute: refusals for the dashboard to count.
    for (let i = 0; i < 3; i++)
      await openai.embeddings.create({ model: LOCAL_MODELS.embed, input: "hello" }).catch(() => undefined);

    const now = Date.now();
    day = new Date(now).toISOString().slice(0, 10);
    const rows = async (table: LakeTable) => {
      const { hour } = partitionOf(table, now);
      const { partitions } = await admin.lake.partitions(table, day);
      return partitions.filter((p) => p.hour <= hour).reduce((n, p) => n + p.rows, 0);
    };
    const deadline = Date.now() + 120_000;
    while (
      (await rows("editor_events")) < 2 * SHOWN ||
      (await rows("edge_requests")) < SHOWN + 1 ||
      (await rows("refusals")) < 2
    ) {
      if (Date.now() > deadline) throw new Error("the lake did not fill in time");
      await new Promise((r) => setTimeout(r, 250));
    }
    data = (await (
      await fetch(`${saved.baseURL}/admin/dashboard/data?day=${day}`, {
        headers: { Authorization: `Bearer ${saved.adminSecret}` },
      })
    ).json()) as DashboardData;
    lakeDir = mkdtempSync(join(tmpdir(), "sextant-dashboard-lake-"));
    const exported = suite.cli(["admin", "lake", "export", "--day", day, "--out", lakeDir]);
    if (exported.code !== 0) throw new Error(exported.stderr);
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
  });

  it("shows the acceptance rate and the tab latency percentiles that DuckDB computes from the lake", async () => {
    const events = `read_parquet('${lakeDir}/editor_events/**/*.parquet', hive_partitioning = true)`;
    const requests = `read_parquet('${lakeDir}/edge_requests/**/*.parquet', hive_partitioning = true)`;
    const [rate] = await duckQuery(
      `SELECT count(*) FILTER (type = 'tab.shown') AS shown, count(*) FILTER (type = 'tab.accepted') AS accepted,
              count(*) FILTER (type = 'tab.accepted') / count(*) FILTER (type = 'tab.shown') AS rate FROM ${events}`,
    );
    const [latency] = await duckQuery(
      `SELECT count(*) AS n, quantile_disc(ttft_ms, 0.5) AS ttft_p50, quantile_disc(ttft_ms, 0.95) AS ttft_p95,
              quantile_disc(total_ms, 0.5) AS total_p50, quantile_disc(total_ms, 0.95) AS total_p95
       FROM ${requests} WHERE class = 'tab' AND outcome = 'completed'`,
    );
    expect(rate).toEqual({ shown: SHOWN, accepted: ACCEPTED, rate: ACCEPTED / SHOWN });
    expect(latency!.n).toBe(SHOWN);
    expect(data.tab.day).toEqual({
      shown: SHOWN,
      accepted: ACCEPTED,
      acceptanceRate: rate!.rate,
      requests: SHOWN,
      ttftP50: latency!.ttft_p50,
      ttftP95: latency!.ttft_p95,
      totalP50: latency!.total_p50,
      totalP95: latency!.total_p95,
    });
    // By hour too.
    const hourly = await duckQuery(
      `SELECT hour, count(*) FILTER (type = 'tab.accepted') / count(*) FILTER (type = 'tab.shown') AS rate
       FROM ${events} GROUP BY hour ORDER BY hour`,
    );
    expect(data.tab.hours.map((h) => [h.hour, h.acceptanceRate])).toEqual(
      hourly.map((h) => [String(h.hour).padStart(2, "0"), h.rate]),
    );
    const [refused] = await duckQuery(
      `SELECT count(*) AS n FROM read_parquet('${lakeDir}/refusals/**/*.parquet') WHERE code = 'rate_limited' AND class = 'embed'`,
    );
    expect(refused!.n).toBeGreaterThanOrEqual(2);
    expect(data.refusals.total).toBe(refused!.n);
  });

  it("signs in with the admin secret in Chromium and draws the figures and charts", async () => {
    const saved = savedLocalEdge(suite.edge);
    const context = await browser.newContext({ viewport: { width: 1400, height: 1800 } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (err) => errors.push(String(err)));
    page.on("console", (msg) => {
      if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) errors.push(msg.text());
    });
    const failed: string[] = [];
    page.on("response", (response) => {
      if (response.status() >= 400) failed.push(`${response.status()} ${new URL(response.url()).pathname}`);
    });
    await page.goto(`${saved.baseURL}/admin/dashboard?day=${day}`);
    await page.fill("#secret", "not-the-secret-0123456789abcdefghijkl");
    await page.click("button[type=submit]");
    await expect.poll(() => page.textContent("[role=alert]")).toContain("not this edge's admin secret");
    await page.fill("#secret", saved.adminSecret);
    await page.click("button[type=submit]");
    await page.waitForSelector("[data-chart=acceptance] canvas");

    const text = async (id: string) => (await page.textContent(`[data-testid="${id}"]`))?.trim();
    expect(await text("acceptance-rate")).toBe(`${((ACCEPTED / SHOWN) * 100).toFixed(1)}%`);
    expect(await text("shown")).toBe(String(SHOWN));
    expect(await text("accepted")).toBe(String(ACCEPTED));
    expect(await text("ttft-p50")).toBe(`${data.tab.day.ttftP50} ms`);
    expect(await text("ttft-p95")).toBe(`${data.tab.day.ttftP95} ms`);
    expect(await text("refusals")).toBe(String(data.refusals.total));
    expect(await page.textContent("[data-testid=endpoints]")).toContain("sim-us-east");
    expect(await page.textContent("[data-testid=usage-table]")).toContain(LOCAL_MODELS.tab);
    expect(await page.textContent("[data-testid=refusal-limits]")).toMatch(/embed/);

    writeFileSync(join(tmpdir(), "sextant-dashboard.png"), await page.screenshot({ fullPage: true }));
    const blank = await context.newPage();
    // Each chart, as a screenshot, holds its series' points or lines and its title.
    for (const chart of ["acceptance", "latency", "usage", "refusals"]) {
      // The plot's canvas alone (the legend's swatches share the colour).
      const shot = await page.locator(`[data-chart="${chart}"] canvas`).screenshot();
      expect(await pixelsOf(blank, shot, SERIES), `${chart}'s series`).toBeGreaterThan(30);
      expect(await page.locator(`[data-chart="${chart}"] .u-title`).count(), `${chart}'s title`).toBe(1);
    }
    expect(errors).toEqual([]);
    // Nothing failed to load but the wrong secret's sign-in.
    expect(failed).toEqual(["403 /admin/dashboard/session"]);

    // Signing out ends the session: the page asks for the secret again.
    await page.click("text=Sign out");
    await page.waitForSelector("#secret");
    await context.close();
  });
});
