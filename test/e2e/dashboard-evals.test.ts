/**
 * The dashboard's Evals panel in headless Chromium (Debian's `chromium`), against `npm start`'s edge
 * and its sandbox host: two eval runs of four of the repository's Harbor tasks
 * (test/fixtures/env-tasks), two attempts each, played by the simulator's scripted agent model (a
 * stand-in for a model server, labelled as such) under two checkpoint labels whose scripts solve
 * different tasks, some on one attempt of two (a script's variant is picked by the attempt's seed).
 * Once both runs have ended and their `eval_attempts` rows are in the lake, the lake is exported
 * and DuckDB computes each run's and each task's pass@1 from the Parquet files: the panel's table,
 * chart and task-by-task comparison must show those figures, the chart a series per
 * model@checkpoint, and the comparison's difference and interval must be compareRuns' over the
 * lake's rows.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SextantAdmin } from "../../client/sdk/index.js";
import { checkTaskDir } from "../../client/envs/task-archive.js";
import { manifestSettings } from "../../client/envs/task-set.js";
import { AgentScriptsBody, type AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import type { DashboardData } from "../../protocol/dashboard.js";
import { EvalReport, EvalRun } from "../../protocol/evals/api.js";
import { compareRuns, type TaskStatsInput } from "../../protocol/evals/stats.js";
import { partitionOf } from "../../protocol/lake.js";
import { rawCall, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { duckQuery } from "../support/duckdb.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ENV_TASKS = join(ROOT, "test/fixtures/env-tasks");
const TASKS = ["roman", "median-even", "sh-count-lines", "py-fibonacci"];
const MODEL = "chat-simulated";
const ATTEMPTS = 2;
/** How each checkpoint plays each task: solves it, gives up, or solves its first attempt of two. */
type Play = "solve" | "give-up" | "first-only";
const CHECKPOINTS: Record<string, Record<string, Play>> = {
  "ckpt-1": { roman: "solve", "median-even": "first-only", "sh-count-lines": "give-up", "py-fibonacci": "solve" },
  "ckpt-2": { roman: "give-up", "median-even": "solve", "sh-count-lines": "first-only", "py-fibonacci": "first-only" },
};
const GIVE_UP: AgentScript["turns"] = [{ toolCalls: [{ name: "finish", arguments: { summary: "Gave up." } }] }];

if (!existsSync(CHROMIUM))
  console.warn(`SKIPPED: the dashboard's browser tests need Chromium at ${CHROMIUM} (apt-get install chromium).`);

/** The fixture's script for each task, made to play it as `plays` says. */
function scriptsFor(all: AgentScript[], plays: Record<string, Play>): AgentScript[] {
  return TASKS.map((task) => {
    const script = all.find((s) => s.name === `env-${task}`)!;
    const play = plays[task]!;
    if (play === "solve") return { ...script, variants: undefined };
    if (play === "give-up") return { ...script, turns: GIVE_UP, variants: undefined };
    // Attempt i is sampled with seed i: variant 0 solves, variant 1 gives up.
    return { ...script, variants: [script.turns, GIVE_UP] };
  });
}

/** Each uPlot chart the page makes, recorded as it makes it (as test/e2e/dashboard.test.ts does). */
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

/** The evals chart as uPlot drew it: each series' label and its values. */
const evalsChart = (page: Page) =>
  page.evaluate(() => {
    const charts = (
      window as unknown as {
        recordedCharts: { root: HTMLElement; series: { label: string }[]; data: (number | null)[][] }[];
      }
    ).recordedCharts;
    const u = charts.find((c) => (c.root.parentElement as HTMLElement).dataset.chart === "evals");
    return u ? u.series.slice(1).map((s, i) => ({ label: s.label, values: u.data[i + 1]! })) : null;
  });

/** A table's body rows, each cell's text and title (where the page keeps a figure's exact value). */
const tableCells = (page: Page, testid: string) =>
  page.$$eval(`[data-testid="${testid}"] tbody tr`, (trs) =>
    trs.map((tr) =>
      [...(tr as HTMLTableRowElement).cells].map((td) => ({ text: td.firstChild?.textContent ?? "", title: td.title })),
    ),
  );

const percent = (r: number) => `${(r * 100).toFixed(1)}%`;
/** The panel's own formatting of an attempt time. */
const duration = (ms: number) =>
  ms < 60_000
    ? `${(ms / 1000).toFixed(1)} s`
    : ms < 3_600_000
      ? `${(ms / 60_000).toFixed(1)} min`
      : `${(ms / 3_600_000).toFixed(1)} h`;
const points = (d: number) => `${d < 0 ? "−" : d > 0 ? "+" : "±"}${Math.abs(d * 100).toFixed(1)} pts`;

describe.skipIf(!existsSync(CHROMIUM))("the dashboard's Evals panel", { timeout: 600_000 }, () => {
  let stack: AgentStack;
  let browser: Browser;
  let key: string;
  let lakeDir: string;
  const runs: EvalReport[] = [];

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
    stack = await startAgentStack();
    key = savedLocalEdge(stack.edge).apiKey;
    const manifest = [];
    for (const task of TASKS) {
      const checked = await checkTaskDir(join(ENV_TASKS, task));
      const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${checked.sha256}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
        body: checked.archive as Uint8Array<ArrayBuffer>,
      });
      expect(put.status, await put.clone().text()).toBe(201);
      manifest.push({
        sha256: checked.sha256,
        bytes: checked.archive.byteLength,
        settings: manifestSettings(checked.task.settings),
      });
    }
    const set = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks: manifest });
    expect(set.status, JSON.stringify(set.json)).toBe(201);
    const taskset = (set.json as { id: string }).id;

    const { scripts } = AgentScriptsBody.parse(JSON.parse(readFileSync(join(ENV_TASKS, "scripts.json"), "utf8")));
    for (const [checkpoint, plays] of Object.entries(CHECKPOINTS)) {
      await setAgentScripts(stack.edge, scriptsFor(scripts, plays));
      const made = await rawCall(stack.edge, key, "POST", "/v1/evals/runs", {
        taskset,
        model: MODEL,
        checkpoint,
        attempts: ATTEMPTS,
        concurrency: 8,
        limits: { wallSeconds: 300 },
      });
      expect(made.status, JSON.stringify(made.json)).toBe(201);
      const { id } = EvalRun.parse(made.json);
      // The run carries on in its object; its report says when it has ended.
      for (let i = 0; ; i++) {
        const report = EvalReport.parse((await rawCall(stack.edge, key, "GET", `/v1/evals/runs/${id}`)).json);
        if (report.status === "ended") {
          runs.push(report);
          break;
        }
        if (i > 1200) throw new Error(`eval run ${id} did not end`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }

    // Every attempt's row in the lake (a run's rows are in the hour it was made), then the lake's files.
    const saved = savedLocalEdge(stack.edge);
    const admin = new SextantAdmin({ baseURL: saved.baseURL, adminSecret: saved.adminSecret });
    const days = [...new Set(runs.map((r) => partitionOf("eval_attempts", Date.parse(r.createdAt)).day))];
    const landed = async () => {
      let n = 0;
      for (const day of days)
        n += (await admin.lake.partitions("eval_attempts", day)).partitions.reduce((s, p) => s + p.rows, 0);
      return n;
    };
    const deadline = Date.now() + 120_000;
    while ((await landed()) < TASKS.length * ATTEMPTS * runs.length) {
      if (Date.now() > deadline) throw new Error("the lake did not take every attempt's row in time");
      await new Promise((r) => setTimeout(r, 250));
    }
    lakeDir = mkdtempSync(join(tmpdir(), "sextant-dashboard-evals-lake-"));
    for (const day of days) {
      const exported = stack.cli([
        "admin",
        "lake",
        "export",
        "--day",
        day,
        "--table",
        "eval_attempts",
        "--out",
        lakeDir,
      ]);
      if (exported.code !== 0) throw new Error(exported.stderr);
    }
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.edge.stop();
  });

  it("shows each run's and each task's pass@1 as DuckDB computes them from the lake, a series per model@checkpoint", async () => {
    const attempts = `read_parquet('${lakeDir}/eval_attempts/**/*.parquet', hive_partitioning = true)`;
    const perTask = `SELECT eval_id, task_index, task_sha256, any_value(model) AS model, any_value(checkpoint) AS checkpoint,
                            count(*) AS n, count(*) FILTER (passed) AS c, avg(CASE WHEN passed THEN 1.0 ELSE 0.0 END) AS pass_at_1,
                            sum(coalesce(reward, 0)) AS reward_sum, sum(duration_ms) AS duration_ms
                     FROM ${attempts} GROUP BY eval_id, task_index, task_sha256`;
    const byRun = await duckQuery(
      `SELECT eval_id, any_value(model) || '@' || any_value(checkpoint) AS label, count(*) AS tasks, sum(n) AS attempts,
              avg(pass_at_1) AS pass_at_1, avg(CASE WHEN c > 0 THEN 1.0 ELSE 0.0 END) AS pass_at_2,
              sum(reward_sum) / sum(n) AS mean_reward, sum(duration_ms) AS duration_ms
       FROM (${perTask}) GROUP BY eval_id`,
    );
    const byTask = await duckQuery(`${perTask} ORDER BY eval_id, task_index`);
    const rows = await duckQuery(
      `SELECT eval_id, task_index, task_sha256, reward, passed, tokens, cost_usd, duration_ms FROM ${attempts} ORDER BY eval_id, task_index, attempt`,
    );
    const [a, b] = runs;
    const lakeRun = (id: string) => byRun.find((r) => r.eval_id === id)!;
    // Each attempt once, and what each checkpoint's scripts make of the tasks: (1 + ½ + 0 + 1) / 4 and (0 + 1 + ½ + ½) / 4.
    expect(byRun.map((r) => [r.eval_id, r.tasks, r.attempts]).sort()).toEqual(
      [a!.id, b!.id].map((id) => [id, TASKS.length, TASKS.length * ATTEMPTS]).sort(),
    );
    expect(lakeRun(a!.id).pass_at_1).toBe(0.625);
    expect(lakeRun(b!.id).pass_at_1).toBe(0.5);

    const saved = savedLocalEdge(stack.edge);
    const context = await browser.newContext({ viewport: { width: 1400, height: 2400 } });
    const page = await context.newPage();
    await page.addInitScript(recordCharts);
    const errors: string[] = [];
    page.on("pageerror", (err) => errors.push(String(err)));
    page.on("console", (msg) => {
      if (msg.type() === "error") errors.push(msg.text());
    });
    await page.goto(`${saved.baseURL}/admin/dashboard`);
    await page.fill("#secret", saved.adminSecret);
    await page.click("button[type=submit]");
    await page.waitForSelector("[data-chart=evals] canvas");
    const data = JSON.parse((await page.textContent("#dashboard-data"))!) as DashboardData;
    expect(data.evals.runs.map((r) => r.id)).toEqual([b!.id, a!.id]);

    // The table of runs: a row per run, newest first, its pass@1 and pass@k those of the lake's rows.
    const table = await tableCells(page, "eval-runs");
    expect(table).toHaveLength(2);
    for (const [i, run] of [b!, a!].entries()) {
      const lake = lakeRun(run.id);
      const [, , label, , status, tasks, each, pass1, passK, reward, , time] = table[i]!;
      expect(label!.text).toBe(lake.label);
      expect(status!.text).toBe("ended");
      expect([tasks!.text, each!.text]).toEqual([String(lake.tasks), String(ATTEMPTS)]);
      expect(pass1!.text).toBe(percent(lake.pass_at_1 as number));
      expect(Number(pass1!.title)).toBeCloseTo(lake.pass_at_1 as number, 12);
      expect(passK!.text).toBe(percent(lake.pass_at_2 as number));
      expect(Number(passK!.title)).toBeCloseTo(lake.pass_at_2 as number, 12);
      // An unverified attempt scores 0 in the mean; the time is the attempts' own, added up.
      expect(reward!.text).toBe((lake.mean_reward as number).toFixed(3));
      expect(time!.text).toBe(duration(lake.duration_ms as number));
    }

    // The chart: a series per model@checkpoint, each holding its run's pass@1.
    const chart = await evalsChart(page);
    expect(chart!.map((s) => s.label).sort()).toEqual(byRun.map((r) => r.label).sort());
    for (const series of chart!) {
      const lake = byRun.find((r) => r.label === series.label)!;
      const drawn = series.values.filter((v) => v !== null);
      expect(drawn).toHaveLength(1);
      expect(drawn[0]).toBeCloseTo(lake.pass_at_1 as number, 12);
    }

    // B (the newer run) against A, task by task: each task's pass@1 in each, who won, and the
    // difference with its interval as compareRuns makes them from the lake's rows.
    await page.waitForSelector(`[data-testid="eval-comparison"][data-compared="${a!.id} ${b!.id}"]`);
    const lakeTasks = (id: string): TaskStatsInput[] =>
      byTask
        .filter((t) => t.eval_id === id)
        .map((t) => ({
          index: t.task_index as number,
          sha256: t.task_sha256 as string,
          broken: null,
          attempts: rows
            .filter((r) => r.eval_id === id && r.task_index === t.task_index)
            .map((r) => ({
              reward: r.reward as number | null,
              passed: r.passed as boolean,
              tokens: r.tokens as number,
              costUsd: r.cost_usd as number | null,
              durationMs: r.duration_ms as number | null,
            })),
        }));
    const expected = compareRuns({ tasks: lakeTasks(a!.id) }, { tasks: lakeTasks(b!.id) });
    const shown = await tableCells(page, "eval-tasks");
    expect(shown).toHaveLength(TASKS.length);
    for (const [i, row] of shown.entries()) {
      const [task, passA, passB, result, difference] = row;
      const index = Number(task!.text);
      const lakeA = byTask.find((t) => t.eval_id === a!.id && t.task_index === index)!;
      const lakeB = byTask.find((t) => t.eval_id === b!.id && t.task_sha256 === lakeA.task_sha256)!;
      const pa = lakeA.pass_at_1 as number;
      const pb = lakeB.pass_at_1 as number;
      expect(index).toBe(i);
      expect([passA!.text, passB!.text]).toEqual([percent(pa), percent(pb)]);
      expect(Number(passA!.title)).toBeCloseTo(pa, 12);
      expect(Number(passB!.title)).toBeCloseTo(pb, 12);
      expect(result!.text).toBe(pb > pa ? "win" : pb < pa ? "loss" : "tie");
      expect(difference!.text).toBe(points(pb - pa));
    }
    const figure = async (id: string) => (await page.textContent(`[data-testid="${id}"]`))?.trim();
    expect(await figure("eval-pass-a")).toBe(percent(lakeRun(a!.id).pass_at_1 as number));
    expect(await figure("eval-pass-b")).toBe(percent(lakeRun(b!.id).pass_at_1 as number));
    expect(await figure("eval-difference")).toBe(points(expected.difference!));
    expect(await figure("eval-difference-sub")).toBe(
      `95% interval ${points(expected.interval!.low)} to ${points(expected.interval!.high)}`,
    );
    expect(await figure("eval-record")).toBe(`${expected.wins} / ${expected.losses} / ${expected.ties}`);
    expect([expected.wins, expected.losses, expected.ties]).toEqual([2, 2, 0]);

    // The other way round, chosen in the selects: the difference changes sign.
    await page.selectOption('[data-testid="eval-a"]', b!.id);
    await page.selectOption('[data-testid="eval-b"]', a!.id);
    await page.waitForSelector(`[data-testid="eval-comparison"][data-compared="${b!.id} ${a!.id}"]`);
    expect(await figure("eval-difference")).toBe(points(-expected.difference!));
    expect(await figure("eval-record")).toBe(`${expected.losses} / ${expected.wins} / ${expected.ties}`);
    await page.selectOption('[data-testid="eval-a"]', a!.id);
    await page.selectOption('[data-testid="eval-b"]', b!.id);
    await page.waitForSelector(`[data-testid="eval-comparison"][data-compared="${a!.id} ${b!.id}"]`);

    writeFileSync(join(tmpdir(), "sextant-dashboard-evals.png"), await page.locator("#evals").screenshot());
    expect(errors).toEqual([]);
    await context.close();
  });
});
