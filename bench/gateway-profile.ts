/**
 * Where the gateway's CPU goes per streamed answer, beside the relay floor's: the same streamed tab
 * completions as `bench/gateway-overhead.ts` (16 tokens each; 200 concurrent streams at 20 tokens/s
 * each by default, or one stream at 1,000 tokens/s with `--streams 1`),
 * first through the edge and then through the Worker that relays each event in JavaScript and does
 * nothing else (`bench/workers/relay.js`), each with its V8 inspector on, taking a CPU profile of the
 * Worker's isolate while the streams run. The report gives each side's CPU per answer over the
 * profiled window (from /proc; the inspector's sampling adds to both), split into parts by where
 * each sample was: the difference between the edge's parts and the floor's is what the gateway adds.
 *
 *   NODE_OPTIONS=--experimental-websocket npx tsx bench/gateway-profile.ts [--streams 200] [--seconds 15] [--interval 1000] [--out /tmp/gateway]
 *   npx tsx bench/gateway-profile.ts --cpu-only [--streams 200] [--rounds 4]   # CPU per answer only, no inspector, sides taking turns
 *
 * (Node 20's WebSocket, which talks to the inspector, is behind that flag.) The profiles are written
 * to `<out>-edge.cpuprofile` and `<out>-relay.cpuprofile` for a viewer.
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { freePort, processCpuSeconds } from "../test/support/local-edge.js";
import { inspect, summarize, type Inspector, type Profile, type ProfileNode } from "./profile.js";
import { startBenchGateway, sleep, type BenchGateway } from "./gateway-fixture.js";
import {
  answerMs,
  CONCURRENT_TOKENS_PER_SECOND,
  TOKENS_PER_SECOND,
  edgeSide as edgeOf,
  OVERHEAD_BACKEND,
  overheadPart,
  send,
  startBaseline,
  workerSide as workerOf,
  type Side,
} from "./gateway-overhead.js";

/**
 * The parts a sample is counted in. The runtime's own stream work (reading the backend's body,
 * writing the client's, decoding and encoding text) and its timers are counted by the native call
 * the sample was in, whoever called it, so that the two Workers compare; any other sample goes to
 * the first part, from the innermost frame out, that names a function on its stack. Names are the
 * bundle's (esbuild keeps them).
 */
/**
 * Reading, parsing, rewriting and writing each event, as one part: the profiler puts a native read's
 * time in the read or in the function that awaited it as it happens to sample, so a finer split of
 * it does not compare from one run to the next.
 */
const STREAM = "the stream: read, parse, rewrite, write each event";

export const PARTS: { part: string; functions: RegExp }[] = [
  { part: "heartbeats", functions: /^(beat|stopHeartbeat)$/ },
  {
    part: STREAM,
    functions: /^(next|feed|processLines|parseLine|onEvent|SseReader|shift|arm|fire|drainedToDone|finish)$/,
  },
  { part: STREAM, functions: /^(relayEvent|parseEvent|usageOf)$/ },
  { part: STREAM, functions: /^(pump|step|begin|relay|emit|send)$/ },
  {
    part: "after the answer: metering, lake records, bookkeeping",
    functions: /^(close|completed|meter|record|flush|sendRows|succeeded|release|leaveClass|chargeTokens|settle)$/,
  },
  { part: "authentication", functions: /^(requireApiKey|authenticate|hashApiKey|bearerToken|lookup)$/ },
  {
    part: "request body: guard, read, JSON, validation",
    functions: /^(guardedRequest|guardedBody|pull|#cachedBody|arrayBuffer|jsonBody|readAhead|safeParse|parse)$/,
  },
  { part: "limits", functions: /^(enforceLimits|admit|cachedLimitsFor|rateLimitHeaders)$/ },
  {
    part: "choosing and calling the backend",
    functions: /^(handle|proxy|decide|launch|attempt|upstreamBody|renderFim|pick|admitRamp|refreshHealth|poolFor)$/,
  },
  {
    part: "routing the request (hono, middleware)",
    functions: /^(dispatch|dispatch2|#dispatch|fetch|match|search|compose|requestId|conventions)$/,
  },
];

const STREAM_IO = new Set(["read", "write", "close", "decode", "encode", "TextDecoder", "TextEncoder"]);
const TIMERS = new Set(["setTimeout", "clearTimeout"]);

/** Each part's share of the profile's busy samples (idle left out). */
export function parts(profile: Profile): { part: string; share: number }[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const partOf = new Map<number, string>();
  const native = (n: ProfileNode) => !n.callFrame.url && !n.callFrame.functionName.startsWith("(");
  const classify = (id: number): string => {
    const known = partOf.get(id);
    if (known) return known;
    const node: ProfileNode = byId.get(id)!;
    const name = node.callFrame.functionName;
    let part = "";
    if (name === "(idle)") part = "(idle)";
    else if (name === "(garbage collector)") part = "garbage collection";
    else if (name === "(program)") part = "the runtime, outside JavaScript";
    else if (native(node) && STREAM_IO.has(name)) part = STREAM;
    else if (native(node) && TIMERS.has(name)) part = "timers (set and cleared)";
    else
      for (let at: number | undefined = id; at !== undefined && !part; at = parent.get(at)) {
        const fn = byId.get(at)!.callFrame.functionName;
        part = PARTS.find((p) => p.functions.test(fn))?.part ?? "";
      }
    part ||= "other (promise jobs, runtime calls)";
    partOf.set(id, part);
    return part;
  };
  const totals = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const part = classify(id);
    totals.set(part, (totals.get(part) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  totals.delete("(idle)");
  const busy = [...totals.values()].reduce((a, b) => a + b, 0);
  return [...totals].map(([part, us]) => ({ part, share: us / Math.max(1, busy) })).sort((a, b) => b.share - a.share);
}

/** `side` asking for `tokens` tokens: complete when the last of them and `[DONE]` came. */
function withTokens(side: Side, tokens: number): Side {
  const body = { ...(JSON.parse(side.init.body!) as object), max_tokens: tokens };
  return {
    ...side,
    init: { ...side.init, body: JSON.stringify(body) },
    complete: (status, text) =>
      status >= 200 && status < 300 && text.includes("data: [DONE]") && text.includes(`sim${tokens - 1} `),
  };
}

/** The simulator's pace per stream, as the overhead benchmark sets it: 1,000 tokens/s alone, a loaded GPU's with many. */
const paceOf = (streams: number) => (streams === 1 ? TOKENS_PER_SECOND : CONCURRENT_TOKENS_PER_SECOND);

/** `streams` closed loops of `side`'s request for `seconds`, profiled; the profile and the answers it saw. */
async function profileUnder(
  inspector: Inspector | null,
  side: Side,
  cpuSeconds: () => number | undefined,
  options: { streams: number; seconds: number; intervalUs: number },
): Promise<{ profile: Profile; answers: number; failed: number; cpuMs?: number }> {
  const { streams, seconds } = options;
  let profiling = false;
  let stop = false;
  let answers = 0;
  let failed = 0;
  const spread = answerMs(paceOf(streams));
  const loops = Array.from({ length: streams }, async (_, i) => {
    await sleep((i * spread) / streams);
    while (!stop) {
      const during = profiling;
      const t = await send(side);
      // Counted only if it ran wholly inside the profile.
      if (during && profiling) {
        if (t.failure) failed++;
        else answers++;
      }
    }
  });
  // Warm up: every stream running, the isolate's code optimised.
  await sleep(Math.max(3000, 2 * spread));
  await inspector?.send("Profiler.enable");
  await inspector?.send("Profiler.setSamplingInterval", { interval: options.intervalUs });
  await inspector?.send("Profiler.start");
  const before = cpuSeconds();
  profiling = true;
  await sleep(seconds * 1000);
  const after = cpuSeconds();
  const { profile } = inspector
    ? await inspector.send<{ profile: Profile }>("Profiler.stop")
    : { profile: { nodes: [], samples: [], timeDeltas: [] } };
  profiling = false;
  stop = true;
  await Promise.all(loops);
  // CPU per answer from /proc over the profiled window (the answers that ran wholly inside it).
  const cpuMs =
    before !== undefined && after !== undefined ? ((after - before) * 1000) / Math.max(1, answers) : undefined;
  return { profile, answers, failed, ...(cpuMs !== undefined ? { cpuMs } : {}) };
}

type Profiled = { profile: Profile; answers: number; cpuMs?: number };

/** Each part in ms of CPU per answer: its share of the busy samples times the side's CPU per answer. */
function table(edge: Profiled, floor: Profiled): string {
  const ms = (side: Profiled) =>
    new Map(parts(side.profile).map((p) => [p.part, p.share * (side.cpuMs ?? Number.NaN)]));
  const e = ms(edge);
  const f = ms(floor);
  const names = [...new Set([...e.keys(), ...f.keys()])];
  const cell = (v: number) => v.toFixed(3).padStart(8);
  const rows = names
    .map((n) => ({ n, e: e.get(n) ?? 0, f: f.get(n) ?? 0 }))
    .sort((a, b) => b.e - b.f - (a.e - a.f))
    .map(({ n, e, f }) => `${n.padEnd(56)} ${cell(e)} ${cell(f)} ${cell(e - f)}`);
  return [
    `${"part (ms of CPU per answer)".padEnd(56)} ${"edge".padStart(8)} ${"floor".padStart(8)} ${"added".padStart(8)}`,
    ...rows,
    `${"total (/proc, while profiled)".padEnd(56)} ${cell(edge.cpuMs ?? Number.NaN)} ${cell(floor.cpuMs ?? Number.NaN)} ${cell((edge.cpuMs ?? Number.NaN) - (floor.cpuMs ?? Number.NaN))}`,
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      streams: { type: "string", default: "200" },
      seconds: { type: "string", default: "15" },
      out: { type: "string", default: "/tmp/gateway" },
      interval: { type: "string", default: "1000" },
      /** CPU per answer alone, from /proc, with no inspector: what a change saves, without the profiler's cost. */
      "cpu-only": { type: "boolean", default: false },
      /** With --cpu-only: turns each side takes. */
      rounds: { type: "string", default: "1" },
      /** Tokens per answer (default the overhead benchmark's 16): few weigh each request's own work, many each event's. */
      tokens: { type: "string", default: "16" },
    },
  });
  const cpuOnly = values["cpu-only"];
  const run = {
    streams: Number(values.streams),
    seconds: Number(values.seconds),
    intervalUs: Number(values.interval),
    rounds: Math.max(1, Number(values.rounds)),
    tokens: Math.max(1, Number(values.tokens)),
  };
  const edgePort = await freePort();
  if (!cpuOnly) process.env.SEXTANT_INSPECTOR_PORT = String(edgePort);
  let gw: BenchGateway | undefined;
  try {
    const started = (gw = await startBenchGateway([overheadPart()], { simulator: "separate process" }));
    await gw.backends.configure(OVERHEAD_BACKEND, {
      tokensPerSecond: paceOf(run.streams),
      completionTokens: Math.max(16, run.tokens),
    });
    const edgeSide = withTokens(edgeOf(gw), run.tokens);
    const workerSide = (origin: string) => withTokens(workerOf(started, origin), run.tokens);
    const pid = gw.edgeWorkerdPid();
    const edgeCpu = () => (pid === undefined ? undefined : processCpuSeconds(pid));
    if (cpuOnly) {
      // Both Workers up at once, taking turns, so that neither gets a quiet or busy spell to itself.
      const relay = await startBaseline("relay.js", gw.backends.url(OVERHEAD_BACKEND));
      try {
        const sides = { edge: { ms: 0, answers: 0, failed: 0 }, floor: { ms: 0, answers: 0, failed: 0 } };
        const ratios: number[] = [];
        for (let round = 0; round < run.rounds; round++) {
          const e = await profileUnder(null, edgeSide, edgeCpu, run);
          const f = await profileUnder(null, workerSide(relay.url), relay.cpuSeconds, run);
          for (const [side, r] of [
            [sides.edge, e],
            [sides.floor, f],
          ] as const) {
            side.ms += (r.cpuMs ?? Number.NaN) * r.answers;
            side.answers += r.answers;
            side.failed += r.failed;
          }
          ratios.push((e.cpuMs ?? Number.NaN) / (f.cpuMs ?? Number.NaN));
        }
        const edgeMs = sides.edge.ms / sides.edge.answers;
        const floorMs = sides.floor.ms / sides.floor.answers;
        const sorted = [...ratios].sort((a, b) => a - b);
        console.log(
          `${run.streams} streams, ${run.rounds} rounds of ${run.seconds} s a side, no inspector: CPU per answer ` +
            `the edge ${edgeMs.toFixed(2)} ms (${sides.edge.answers} answers, ${sides.edge.failed} failed), ` +
            `the relay floor ${floorMs.toFixed(2)} ms (${sides.floor.answers}, ${sides.floor.failed} failed): ` +
            `${(edgeMs / floorMs).toFixed(2)}x (rounds ${sorted[0]!.toFixed(2)}x to ${sorted.at(-1)!.toFixed(2)}x)`,
        );
      } finally {
        await relay.stop();
      }
    } else {
      const edgeInspector = await inspect(edgePort, (t) => / sextant$/.test(t) || t.endsWith("core:user:sextant"));
      const edge = await profileUnder(edgeInspector, edgeSide, edgeCpu, run);
      edgeInspector.close();
      const relayInspectorPort = await freePort();
      const relay = await startBaseline("relay.js", gw.backends.url(OVERHEAD_BACKEND), relayInspectorPort);
      let floor;
      try {
        const relayInspector = await inspect(relayInspectorPort, () => true);
        floor = await profileUnder(relayInspector, workerSide(relay.url), relay.cpuSeconds, run);
        relayInspector.close();
      } finally {
        await relay.stop();
      }
      writeFileSync(`${values.out}-edge.cpuprofile`, JSON.stringify(edge.profile));
      writeFileSync(`${values.out}-relay.cpuprofile`, JSON.stringify(floor.profile));
      console.log(
        `${run.streams} streams, ${run.seconds} s profiled a side (a sample every ${run.intervalUs} µs): ` +
          `the edge ${edge.answers} answers (${edge.failed} failed), the relay floor ${floor.answers} (${floor.failed} failed); ` +
          `profiles in ${values.out}-{edge,relay}.cpuprofile`,
      );
      console.log(table(edge, floor));
      console.log(`\nthe edge's profile\n${summarize(edge.profile, 30)}`);
      console.log(`\nthe relay floor's profile\n${summarize(floor.profile, 15)}`);
    }
  } finally {
    await gw?.stop();
  }
}
