/**
 * Priority under overload: one simulated endpoint of capacity C shared by a tab pool and an apply
 * pool. Tab traffic runs at a fixed offered concurrency of C/2 (closed loop) throughout; apply
 * (chat completions to the apply pool) and background (the tab pool, `X-Sextant-Priority:
 * background`) are added on top: (a) tab alone, the unloaded baseline; (b) 1x, C offered in all
 * (tab C/2, apply C/4, background C/4); (c) 2x, 2C offered (tab C/2, apply 3C/4, background 3C/4).
 *
 *   npx tsx bench/gateway-overload.ts        # C = 16, 20 s per scenario, four scenarios, 4 rounds
 *
 * The scenarios take turns: each round runs every scenario for its share of the time, in order in
 * even rounds and the other way round in odd ones, so that whatever else the machine does meanwhile
 * falls on the baseline (tab alone) and the overloads alike.
 *
 * A shed apply or background client waits what the answer's Retry-After says, as the SDKs do; a
 * fourth scenario repeats 2x with clients that retry 100 ms after a shed, ignoring it. Tab's time
 * to first token is split, request by request, into the way to the backend (the edge's admission,
 * queueing and work), the backend's own time to first token, and the way back, from the
 * simulator's records.
 */
import { pathToFileURL } from "node:url";
import OpenAI from "openai";
import {
  VIRGINIA,
  closedLoop,
  pct,
  quantileOf,
  sleep,
  streamCompletion,
  verdict,
  whole,
  withGateway,
  type BenchGateway,
  type BenchPart,
} from "./gateway-fixture.js";
import { fmt } from "./stats.js";

export interface OverloadOptions {
  /** The endpoint's capacity C (the simulator's too). Default 16. */
  capacity?: number;
  /** Per scenario, over all rounds. Default 20 s. */
  durationMs?: number;
  /** Rounds each scenario's time is split into. Default 4. */
  rounds?: number;
  gateway?: BenchGateway;
}

const BACKEND = "overload";
const TAB_MODEL = "tab-overload";
const APPLY_MODEL = "apply-overload";
const TOKENS = 10;
const TTFT_MS = 50;
/** Tab's success rate and p95 time to first token at 2x, against the unloaded p95. */
export const OVERLOAD_TARGETS = { tabSuccess: 0.99, p95Ratio: 1.5 } as const;

export function overloadPart(options: Pick<OverloadOptions, "capacity"> = {}): BenchPart {
  const capacity = options.capacity ?? 16;
  return {
    // 50 ms to the first token and 100 tokens/s: a 10-token request takes about 140 ms.
    backends: [{ id: BACKEND, ttftMs: TTFT_MS, tokensPerSecond: 100, completionTokens: TOKENS, capacity }],
    pools: (urls) => {
      // The same endpoint (same id and URL) in both pools: their classes share its capacity.
      const endpoints = [
        {
          id: BACKEND,
          region: "us-east",
          ...VIRGINIA,
          url: urls[BACKEND]!,
          model: "sim-model",
          kind: "vllm" as const,
          capacity,
        },
      ];
      return {
        "bench-overload-tab": { role: "tab", models: [TAB_MODEL], fim: "qwen2.5-coder", endpoints },
        "bench-overload-apply": { role: "apply", models: [APPLY_MODEL], endpoints },
      };
    },
  };
}

export interface ClassFigures {
  /** Closed-loop clients. */
  clients: number;
  requests: number;
  ok: number;
  /** 503 or 429 from the edge. */
  shed: number;
  shedWithRetryAfter: number;
  /** Any other failure. */
  failed: number;
}

export interface Split {
  p50: number;
  p95: number;
}

export interface TabFigures extends ClassFigures {
  ttft: Split;
  /** From the call to the backend receiving the request: the edge's admission, queue and work. */
  toBackend: Split;
  /** The backend's own time to first token. */
  backend: Split;
  /** From the backend's first token to the client reading it. */
  back: Split;
}

type Backoff = "retry-after" | number;

/** Apply and background offered as shares of C (tab is C/2 in each), and how a shed client backs off. */
const SCENARIOS: { name: string; apply: number; background: number; backoff: Backoff }[] = [
  { name: "tab alone", apply: 0, background: 0, backoff: "retry-after" },
  { name: "1x", apply: 0.25, background: 0.25, backoff: "retry-after" },
  { name: "2x", apply: 0.75, background: 0.75, backoff: "retry-after" },
  // Clients that ignore Retry-After: their shed requests come back ten times a second.
  { name: "2x, 100 ms", apply: 0.75, background: 0.75, backoff: 100 },
];

export interface OverloadScenario {
  name: string;
  backoff: Backoff;
  /** Offered concurrency, all classes, as a multiple of C. */
  offered: number;
  tab: TabFigures;
  apply: ClassFigures;
  background: ClassFigures;
  /** Most requests the simulated backend had in flight at once. */
  peak: number;
}

export interface OverloadFigures {
  capacity: number;
  durationMs: number;
  rounds: number;
  /** The scenarios' names in the order their turns ran. */
  order: string[];
  requestMs: number;
  scenarios: OverloadScenario[];
}

const counts = (clients: number): ClassFigures => ({
  clients,
  requests: 0,
  ok: 0,
  shed: 0,
  shedWithRetryAfter: 0,
  failed: 0,
});

/** Counts an error; returns how long to back off when it was shed. */
function tally(figures: ClassFigures, err: unknown, backoff: Backoff): number {
  if (!(err instanceof OpenAI.APIError) || (err.status !== 503 && err.status !== 429)) {
    figures.failed++;
    return 0;
  }
  figures.shed++;
  const retryAfter = Number(err.headers?.get("retry-after") ?? Number.NaN);
  if (Number.isFinite(retryAfter)) figures.shedWithRetryAfter++;
  if (backoff !== "retry-after") return backoff;
  return Number.isFinite(retryAfter) ? retryAfter * 1000 : 1000;
}

const split = (values: number[]): Split => ({ p50: quantileOf(values, 0.5), p95: quantileOf(values, 0.95) });

/** What one scenario's turns have measured so far. */
interface Tally {
  tab: ClassFigures;
  apply: ClassFigures;
  background: ClassFigures;
  /** Tab's whole answers by request id. */
  ttfts: Map<string, { startedAt: number; ttftMs: number }>;
  /** Most requests the backend had in flight at once in any of the scenario's turns. */
  peak: number;
}

function tallyFor(c: number, { apply, background }: (typeof SCENARIOS)[number]): Tally {
  return {
    tab: counts(Math.max(1, Math.round(c / 2))),
    apply: counts(Math.round(c * apply)),
    background: counts(Math.round(c * background)),
    ttfts: new Map(),
    peak: 0,
  };
}

/** One turn of a scenario, `durationMs` long, added to its tally. */
async function turn(
  gw: BenchGateway,
  durationMs: number,
  { name, backoff }: (typeof SCENARIOS)[number],
  t: Tally,
): Promise<void> {
  const { tab, apply, background, ttfts } = t;
  const prefix = `overload-${name.replace(/\W+/g, "-")}-${Date.now()}`;
  const client = gw.openai({ timeout: 30_000 });
  const lowered = gw.openai({ timeout: 30_000, defaultHeaders: { "X-Sextant-Priority": "background" } });
  await gw.backends.resetPeak(BACKEND);
  const end = performance.now() + durationMs;
  const running = () => performance.now() < end;
  const lower = async (figures: ClassFigures, call: () => Promise<unknown>) => {
    figures.requests++;
    try {
      await call();
      figures.ok++;
    } catch (err) {
      await sleep(tally(figures, err, backoff));
    }
  };
  await Promise.all([
    closedLoop(tab.clients, running, async () => {
      const id = `${prefix}-${tab.requests++}`;
      const r = await streamCompletion(
        client,
        { model: TAB_MODEL, prompt: "def f(", suffix: "):\n", max_tokens: TOKENS },
        { "X-Request-Id": id },
      );
      if (r.error) await sleep(tally(tab, r.error, backoff));
      else if (whole(r, TOKENS)) {
        tab.ok++;
        ttfts.set(id, { startedAt: r.startedAt, ttftMs: r.ttftMs! });
      } else tab.failed++;
    }),
    closedLoop(apply.clients, running, () =>
      lower(apply, () =>
        client.chat.completions.create({
          model: APPLY_MODEL,
          messages: [{ role: "user", content: "Apply this edit." }],
          max_tokens: TOKENS,
        }),
      ),
    ),
    closedLoop(background.clients, running, () =>
      lower(background, () =>
        lowered.completions.create({ model: TAB_MODEL, prompt: "def g(", suffix: "):\n", max_tokens: TOKENS }),
      ),
    ),
  ]);
  t.peak = Math.max(t.peak, await gw.backends.peak(BACKEND));
}

/** A scenario's figures from its tally, tab's time to first token split by the simulator's records. */
function summary(
  c: number,
  { name, backoff }: (typeof SCENARIOS)[number],
  t: Tally,
  records: Awaited<ReturnType<BenchGateway["backends"]["records"]>>,
): OverloadScenario {
  const parts = { toBackend: [] as number[], backend: [] as number[], back: [] as number[] };
  for (const record of records) {
    const r = t.ttfts.get(record.requestId);
    if (!r || record.firstTokenAt === undefined) continue;
    parts.toBackend.push(record.receivedAt - r.startedAt);
    parts.backend.push(record.firstTokenAt - record.receivedAt);
    parts.back.push(r.startedAt + r.ttftMs - record.firstTokenAt);
  }
  return {
    name,
    backoff,
    offered: (t.tab.clients + t.apply.clients + t.background.clients) / c,
    tab: {
      ...t.tab,
      ttft: split([...t.ttfts.values()].map((r) => r.ttftMs)),
      toBackend: split(parts.toBackend),
      backend: split(parts.backend),
      back: split(parts.back),
    },
    apply: t.apply,
    background: t.background,
    peak: t.peak,
  };
}

export async function runOverload(options: OverloadOptions = {}): Promise<OverloadFigures> {
  const c = options.capacity ?? 16;
  const durationMs = options.durationMs ?? 20_000;
  const rounds = options.rounds ?? 4;
  if (!(Number.isInteger(rounds) && rounds >= 1)) throw new RangeError(`rounds: ${rounds}`);
  return withGateway(overloadPart({ capacity: c }), options, async (gw) => {
    // Warm the edge's key cache, the health snapshot and the connections.
    await turn(gw, 1_000, SCENARIOS[0]!, tallyFor(c, SCENARIOS[0]!));
    const tallies = SCENARIOS.map((s) => tallyFor(c, s));
    const order: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const indices = SCENARIOS.map((_, i) => (round % 2 === 0 ? i : SCENARIOS.length - 1 - i));
      for (const i of indices) {
        order.push(SCENARIOS[i]!.name);
        await turn(gw, durationMs / rounds, SCENARIOS[i]!, tallies[i]!);
      }
    }
    const records = await gw.backends.records(BACKEND);
    const scenarios = SCENARIOS.map((s, i) => summary(c, s, tallies[i]!, records));
    const requestMs = TTFT_MS + ((TOKENS - 1) * 1000) / 100;
    return { capacity: c, durationMs, rounds, order, requestMs, scenarios };
  });
}

export function reportOverload(f: OverloadFigures): string {
  const base = f.scenarios[0]!.tab.ttft.p95;
  const ms = (x: number) => `${fmt(x)}`.padStart(5);
  const both = (x: Split) => `${ms(x.p50)} /${ms(x.p95)}`;
  const lower = (x: ClassFigures) =>
    `${String(x.clients).padStart(2)} clients: ${x.ok} ok, ${x.shed} shed (${x.shedWithRetryAfter} with Retry-After), ${x.failed} failed`;
  const lines = [
    `gateway overload: one simulated endpoint of capacity C = ${f.capacity} (a request takes ~${f.requestMs} ms unloaded), tab at C/2 closed-loop clients throughout, ${f.durationMs / 1000} s per scenario in ${f.rounds} round${f.rounds === 1 ? "" : "s"} of ${+(f.durationMs / f.rounds / 1000).toFixed(2)} s, the scenarios taking turns in each (in order in even rounds, the other way round in odd ones); shed apply/background clients wait the answer's Retry-After, except in "2x, 100 ms" (a fixed 100 ms)`,
    "tab ttft, ms p50 / p95, and its parts: to the backend (edge admission, queue, work), the backend's own, back to the client",
    "scenario   offered | requests  success |  ttft p50/p95  vs unloaded p95 | to backend    backend       back      | peak in flight",
  ];
  for (const s of f.scenarios) {
    const t = s.tab;
    lines.push(
      `${s.name.padEnd(10)} ${`${s.offered.toFixed(2)}C`.padStart(7)} | ${String(t.requests).padStart(8)} ${pct(t.ok, t.requests).padStart(8)} | ${both(t.ttft)} ${`${(t.ttft.p95 / base).toFixed(2)}x`.padStart(16)} | ${both(t.toBackend)} ${both(t.backend)} ${both(t.back)} | ${s.peak} (C = ${f.capacity})`,
    );
    if (t.shed + t.failed > 0) lines.push(`           tab: ${t.shed} shed, ${t.failed} failed`);
    if (s.apply.clients) lines.push(`           apply      ${lower(s.apply)}`);
    if (s.background.clients) lines.push(`           background ${lower(s.background)}`);
  }
  for (const s of f.scenarios.filter((x) => x.name.startsWith("2x"))) {
    const ratio = s.tab.ttft.p95 / base;
    lines.push(
      `targets at ${s.name}: tab success ${pct(s.tab.ok, s.tab.requests)} >= 99% ${verdict(s.tab.ok / s.tab.requests >= OVERLOAD_TARGETS.tabSuccess)}; ` +
        `tab p95 ttft ${ratio.toFixed(2)}x unloaded <= ${OVERLOAD_TARGETS.p95Ratio}x ${verdict(ratio <= OVERLOAD_TARGETS.p95Ratio)}; ` +
        `peak ${s.peak} <= C ${verdict(s.peak <= f.capacity)}`,
    );
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportOverload(await runOverload()));
}
