/**
 * The operator's dashboard in headless Chromium (Debian's `chromium`), against a local edge with
 * real traffic: tab completions and their events, a long chat request, refused requests and an agent
 * task. Its figures must equal what DuckDB computes from the lake's Parquet files, its charts must be
 * drawn over the days and hours they cover and follow the window's width, and its tables must show
 * every figure whole and each key by its name.
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
/** A chat prompt of about 2,400 tokens (the simulator counts 4 characters a token): a usage figure with a comma. */
const LONG_PROMPT = "lorem ipsum ".repeat(800);
const DAY_SECONDS = 86_400;
/** A key named as scripts' keys often are: one word with nowhere to break a line. */
const CI_KEY_NAME = "ci_nightly_benchmarks_eu_west_2";

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

/**
 * Each uPlot chart the page makes, recorded as it makes it (window.uPlot wrapped as the page's script
 * defines it), so that a test reads the scales uPlot drew rather than the page's own account of them.
 */
function recordCharts(): void {
  let real: unknown;
  const charts: unknown[] = [];
  Object.defineProperty(window, "recordedCharts", { value: charts });
  Object.defineProperty(window, "uPlot", {
    configurable: true,
    get: () => real,
    set: (value: object) => {
      real = new Proxy(value as new (...args: unknown[]) => object, {
        construct(target, args) {
          const chart = Reflect.construct(target, args);
          charts.push(chart);
          return chart;
        },
      });
    },
  });
}

interface DrawnChart {
  name: string;
  xMin: number;
  xMax: number;
  /** The container's width and the canvas's, in CSS pixels. */
  container: number;
  canvas: number;
}

const drawnCharts = (page: Page): Promise<DrawnChart[]> =>
  page.evaluate(() =>
    (
      window as unknown as { recordedCharts: { root: HTMLElement; scales: { x: { min: number; max: number } } }[] }
    ).recordedCharts.map((u) => ({
      name: (u.root.parentElement as HTMLElement).dataset.chart!,
      xMin: u.scales.x.min,
      xMax: u.scales.x.max,
      container: (u.root.parentElement as HTMLElement).clientWidth,
      canvas: u.root.querySelector("canvas")!.getBoundingClientRect().width,
    })),
  );

/**
 * The usage table's cells, each with whether its text is all in sight: not cut by the cell or its
 * section, and the topmost thing on the page at its text's last character.
 */
const usageCells = (page: Page) =>
  page.$$eval('[data-testid="usage-table"] tbody tr', (trs) =>
    trs.map((tr) =>
      [...(tr as HTMLTableRowElement).cells].map((td) => {
        const range = document.createRange();
        range.selectNodeContents(td);
        const text = range.getBoundingClientRect();
        const section = td.closest("section")!;
        const box = section.getBoundingClientRect();
        const top = document.elementFromPoint(text.right - 2, text.top + text.height / 2);
        return {
          text: td.textContent!,
          visible:
            td.scrollWidth <= td.clientWidth &&
            section.scrollWidth <= section.clientWidth &&
            text.left >= box.left &&
            text.right <= box.right &&
            top !== null &&
            td.contains(top),
        };
      }),
    ),
  );

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
  let ciKeySecret: string;

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
    await openai.chat.completions.create({
      model: LOCAL_MODELS.chat,
      messages: [{ role: "user", content: LONG_PROMPT }],
      max_tokens: 8,
    });
    const me = await sextant.me();
    const ciKey = await admin.keys.create({ userId: me.user.id, name: CI_KEY_NAME });
    ciKeySecret = ciKey.key;
    const ci = new OpenAI({ baseURL: `${saved.baseURL}/v1`, apiKey: ciKey.key, maxRetries: 0 });
    await ci.chat.completions.create({
      model: LOCAL_MODELS.chat,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    });
    // One agent task, today: a day among thirteen without any.
    const task = await sextant.agents.create({ prompt: "Wait for the files (dashboard fixture).", source: "upload" });
    await sextant.agents.cancel(task.id);
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
    // A laptop's window: two columns, and little room to spare in the usage table's.
    const context = await browser.newContext({ viewport: { width: 1280, height: 1800 } });
    const page = await context.newPage();
    await page.addInitScript(recordCharts);
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

    // Each usage row's figures whole, in sight and formatted, and its key by name and display prefix, never
    // its secret. (Soft: each of the page's defects is reported, not only the first.)
    const admin = new SextantAdmin({ baseURL: saved.baseURL, adminSecret: saved.adminSecret });
    const keys = await admin.keys.list(data.usage.rows[0]!.orgId);
    const usageShown = async (width: number) => {
      const cells = await usageCells(page);
      expect(cells).toHaveLength(data.usage.rows.length);
      data.usage.rows.forEach((row, i) => {
        const [, , keyCell, , requests, tokens] = cells[i]!;
        const key = keys.find((k) => k.id === row.keyId)!;
        expect.soft(keyCell!.text, `a key's name at ${width} px`).toBe(`${key.name}${key.prefix}…`);
        expect
          .soft(requests, `requests at ${width} px`)
          .toEqual({ text: row.requests.toLocaleString("en-US"), visible: true });
        expect
          .soft(tokens, `tokens at ${width} px`)
          .toEqual({ text: (row.promptTokens + row.completionTokens).toLocaleString("en-US"), visible: true });
      });
    };
    expect(Math.max(...data.usage.rows.map((r) => r.promptTokens + r.completionTokens))).toBeGreaterThan(1000);
    expect(keys.map((k) => k.name).sort()).toEqual([CI_KEY_NAME, "local development"]);
    expect(new Set(data.usage.rows.map((r) => r.keyId)).size).toBe(2);
    await usageShown(1280);
    const html = await page.content();
    for (const secret of [saved.apiKey, ciKeySecret]) expect(html).not.toContain(secret);

    // Every chart's x axis spans the hours or days it has data for, and no more.
    const firstDay = Date.parse(`${data.usage.days[0]}T00:00:00Z`) / 1000;
    const dayStart = Date.parse(`${day}T00:00:00Z`) / 1000;
    const drawn = await drawnCharts(page);
    expect(drawn.map((c) => c.name).sort()).toEqual(["acceptance", "agents", "latency", "refusals", "usage"]);
    for (const c of drawn) {
      const [from, to] =
        c.name === "usage" || c.name === "agents" ? [firstDay, dayStart] : [dayStart, dayStart + DAY_SECONDS];
      expect.soft(c.xMin, `${c.name}'s x axis`).toBeGreaterThanOrEqual(from);
      expect.soft(c.xMax, `${c.name}'s x axis`).toBeLessThanOrEqual(to);
      expect.soft(c.canvas, `${c.name}'s width`).toBe(c.container);
    }

    writeFileSync(join(tmpdir(), "sextant-dashboard.png"), await page.screenshot({ fullPage: true }));
    const blank = await context.newPage();
    // Each chart, as a screenshot, holds its series' points or lines and its title.
    for (const chart of ["acceptance", "latency", "usage", "refusals", "agents"]) {
      // The plot's canvas alone (the legend's swatches share the colour).
      const shot = await page.locator(`[data-chart="${chart}"] canvas`).screenshot();
      expect(await pixelsOf(blank, shot, SERIES), `${chart}'s series`).toBeGreaterThan(30);
      expect(await page.locator(`[data-chart="${chart}"] .u-title`).count(), `${chart}'s title`).toBe(1);
    }

    // A narrower window (one column): each chart's container changes width, and its canvas follows.
    await page.setViewportSize({ width: 900, height: 1800 });
    const resized = async () =>
      (await drawnCharts(page)).map((c, i) => ({
        chart: c.name,
        containerChanged: c.container !== drawn[i]!.container,
        canvasFollows: c.canvas === c.container,
      }));
    await expect
      .poll(resized, { timeout: 10_000 })
      .toEqual(drawn.map((c) => ({ chart: c.name, containerChanged: true, canvasFollows: true })));
    await usageShown(900);

    expect(errors).toEqual([]);
    // Nothing failed to load but the wrong secret's sign-in.
    expect(failed).toEqual(["403 /admin/dashboard/session"]);

    // Signing out ends the session: the page asks for the secret again.
    await page.click("text=Sign out");
    await page.waitForSelector("#secret");
    await context.close();
  });
});
