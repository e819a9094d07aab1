import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fault } from "../../gpu-backends/simulator/simulator.js";
import { userShare, type GatewayConfigInput } from "../../protocol/gateway.js";
import { LONDON, VIRGINIA, sleep, startGateway, until, type GatewayFixture } from "../support/gateway.js";

/**
 * Faults of simulated GPU backends (stand-ins for vLLM) behind the real local edge, one case
 * each, asserting what the `openai` SDK sees and what each backend saw. Every case has its own
 * pair of regions (Virginia, nearest, and London), so ejections in one case cannot leak into
 * another.
 */
const FAULTS: Record<string, { fault: Fault; midStream?: true }> = {
  refuse: { fault: { type: "refuse" } },
  "status-500": { fault: { type: "status", status: 500 } },
  "status-503": { fault: { type: "status", status: 503 } },
  "hang-before-headers": { fault: { type: "hangBeforeHeaders" } },
  "hang-before-first-token": { fault: { type: "hangMidStream", afterTokens: 0 } },
  "malformed-first-event": { fault: { type: "malformedSse", afterTokens: 0 } },
  "slow-drip": { fault: { type: "slowDrip", intervalMs: 1_000 } },
  "hang-mid-stream": { fault: { type: "hangMidStream", afterTokens: 2 }, midStream: true },
  "malformed-mid-stream": { fault: { type: "malformedSse", afterTokens: 2 }, midStream: true },
  unhealthy: { fault: { type: "unhealthy" } },
};

const MODELS = ["sim-coder"];
const TIMEOUTS = { connectMs: 300, firstByteMs: 400, gapMs: 300, deadlineMs: 5_000 };

function pair(name: string, urls: Record<string, string>, capacity = 8) {
  return [
    {
      id: `${name}-east`,
      region: "us-east",
      ...VIRGINIA,
      url: urls[`${name}-east`]!,
      model: "sim-coder",
      kind: "vllm" as const,
      capacity,
    },
    {
      id: `${name}-west`,
      region: "eu-west",
      ...LONDON,
      url: urls[`${name}-west`]!,
      model: "sim-coder",
      kind: "vllm" as const,
      capacity,
    },
  ];
}

function config(urls: Record<string, string>): GatewayConfigInput {
  const pools: GatewayConfigInput["pools"] = {};
  for (const name of Object.keys(FAULTS))
    pools[name] = {
      role: "tab",
      models: [`tab-${name}`],
      fim: "qwen2.5-coder",
      endpoints: pair(name, urls),
      timeouts: TIMEOUTS,
    };
  pools.hedge = {
    role: "tab",
    models: ["tab-hedge"],
    fim: "qwen2.5-coder",
    endpoints: pair("hedge", urls),
    timeouts: TIMEOUTS,
    hedgeAfterMs: 100,
  };
  const overload = [
    { id: "ov", region: "us-east", ...VIRGINIA, url: urls.ov!, model: "sim-coder", kind: "vllm" as const, capacity: 4 },
  ];
  pools["ov-tab"] = { role: "tab", models: ["tab-ov"], fim: "qwen2.5-coder", endpoints: overload };
  pools["ov-apply"] = { role: "apply", models: ["apply-ov"], endpoints: overload };
  pools.ramp = {
    role: "tab",
    models: ["tab-ramp"],
    fim: "qwen2.5-coder",
    endpoints: pair("ramp", urls, 3),
    timeouts: TIMEOUTS,
    recovery: { rampMs: 4_000, slowStartMs: 4_000 },
  };
  return {
    pools,
    health: {
      probeIntervalMs: 250,
      probeTimeoutMs: 200,
      snapshotMaxAgeMs: 100,
      ejectAfterFailures: 3,
      ejectionMs: 60_000,
    },
    tabQueueMs: 100,
  };
}

interface StreamResult {
  text: string;
  finish: string | null;
  error?: InstanceType<typeof OpenAI.APIError>;
}

async function streamTab(client: OpenAI, model: string, maxTokens = 4): Promise<StreamResult> {
  let text = "";
  let finish: string | null = null;
  try {
    const stream = await client.completions.create({
      model,
      prompt: "def f():",
      suffix: "\n",
      max_tokens: maxTokens,
      stream: true,
    });
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    return { text, finish };
  } catch (err) {
    if (err instanceof OpenAI.APIError) return { text, finish, error: err };
    throw err;
  }
}

describe("gateway failure handling", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    const backends = [
      ...[...Object.keys(FAULTS), "hedge", "ramp"].flatMap((name) => [
        { id: `${name}-east`, models: MODELS, tokensPerSecond: 200, ttftMs: 10 },
        { id: `${name}-west`, models: MODELS, tokensPerSecond: 200, ttftMs: 10 },
      ]),
      { id: "ov", models: MODELS, capacity: 4, ttftMs: 300, tokensPerSecond: 50 },
    ];
    gw = await startGateway(backends, config);
  }, 120_000);
  afterAll(async () => gw?.stop());

  const posts = (id: string) =>
    gw.sim
      .backend(id)
      .records()
      .filter((r) => r.method === "POST");

  describe.each(Object.entries(FAULTS))("with the nearest region failing (%s)", (name, { fault, midStream }) => {
    it("keeps tab answering from the other region and never truncates a stream silently", async () => {
      await gw.sim.backend(`${name}-east`).configure({ fault });
      if (fault.type === "unhealthy") {
        // Active probes take the region out of rotation before any request is sent to it.
        await until("the probes to notice", async () => {
          await streamTab(gw.openai(), `tab-${name}`);
          const before = posts(`${name}-east`).length;
          await streamTab(gw.openai(), `tab-${name}`);
          return posts(`${name}-east`).length === before || undefined;
        });
        gw.sim.backend(`${name}-east`).clear();
        gw.sim.backend(`${name}-west`).clear();
      }
      const results: StreamResult[] = [];
      for (let i = 0; i < 8; i++) results.push(await streamTab(gw.openai(), `tab-${name}`));

      // Every stream completes: failures before the first token fail over, and a tab stream that
      // breaks after it resumes on the other region from the text already sent.
      for (const r of results) {
        expect(r.error).toBeUndefined();
        expect(r.finish).toBe("length");
        if (midStream) expect(r.text.trim().split(" ")).toHaveLength(4);
        else expect(r.text).toBe("sim0 sim1 sim2 sim3 ");
      }
      const east = posts(`${name}-east`);
      if (fault.type === "unhealthy") expect(east).toHaveLength(0);
      else if (fault.type === "refuse") expect(east).toHaveLength(0);
      else if (fault.type === "status" && fault.status === 503) {
        // "Full" is not "broken": never ejected, only left alone for a second at a time.
        expect(east.length).toBeGreaterThanOrEqual(1);
      } else {
        // Passive ejection after three failures: the rest go straight to the healthy region.
        expect(east.length).toBeLessThanOrEqual(3);
      }
      // What the edge gave up on, it cancelled.
      for (const r of east)
        if (r.outcome === "pending" || r.fault === "hangBeforeHeaders")
          expect(r.abortedAt).toBeGreaterThanOrEqual(r.receivedAt);
      const west = posts(`${name}-west`).filter((r) => r.outcome === "completed");
      expect(west).toHaveLength(8);
      if (midStream) {
        const resumed = west.filter((r) =>
          (r.body as { prompt: string }).prompt.includes("def f():sim0 sim1 <|fim_suffix|>"),
        );
        expect(resumed.length).toBe(east.length);
        expect(resumed.every((r) => (r.body as { max_tokens: number }).max_tokens === 2)).toBe(true);
      }
    });
  });

  it("hedges a late tab request to the other region and cancels the loser", async () => {
    await gw.sim.backend("hedge-east").configure({ ttftMs: 2_000 });
    const { data, response } = await gw
      .openai()
      .completions.create({ model: "tab-hedge", prompt: "x", suffix: "", max_tokens: 2 })
      .withResponse();
    expect(data.choices[0]!.text).toBe("sim0 sim1 ");
    expect(response.headers.get("x-sextant-backend")).toBe("hedge-west");
    const [east] = posts("hedge-east");
    const [west] = posts("hedge-west");
    expect(west!.receivedAt).toBeGreaterThan(east!.receivedAt);
    const loser = await until("the loser to be cancelled", () => posts("hedge-east").find((r) => r.abortedAt));
    expect(loser.outcome).toBe("aborted");
  });

  it("sheds lower classes first under overload while tab keeps its share", async () => {
    const ov = gw.sim.backend("ov");
    ov.resetPeak();
    const background = gw.openai({ defaultHeaders: { "X-Sextant-Priority": "background" } });
    const flood = Array.from({ length: 8 }, () =>
      background.completions.create({ model: "tab-ov", prompt: "bg", suffix: "", max_tokens: 10 }).then(
        () => "ok" as const,
        (err: unknown) => err,
      ),
    );
    await until("the background requests to start", () => ov.inflight() === 2 || undefined);
    const applies = Array.from({ length: 3 }, () =>
      gw
        .openai()
        .chat.completions.create({ model: "apply-ov", messages: [{ role: "user", content: "x" }], max_tokens: 10 })
        .then(
          () => "ok" as const,
          (err: unknown) => err,
        ),
    );
    await sleep(100);
    const tabs = await Promise.all(Array.from({ length: 1 }, () => streamTab(gw.openai(), "tab-ov", 2)));
    const bg = await Promise.all(flood);
    const ap = await Promise.all(applies);
    expect(tabs.every((t) => !t.error && t.text === "sim0 sim1 ")).toBe(true);
    // Background may fill half the endpoint, apply three quarters.
    expect(bg.filter((r) => r === "ok")).toHaveLength(2);
    expect(ap.filter((r) => r === "ok")).toHaveLength(1);
    for (const refused of [...bg, ...ap].filter((r) => r !== "ok")) {
      const err = refused as InstanceType<typeof OpenAI.APIError>;
      expect(err.status).toBe(503);
      expect(err.headers?.get("retry-after")).toBe("1");
      expect(err.headers?.get("content-type")).toBe("application/problem+json");
      expect(err.message).toMatch(/being shed/);
    }
    expect(ov.peakConcurrency()).toBeLessThanOrEqual(4);
  });

  it("ramps admission after a total outage: paid tiers first, never past a backend's capacity", async () => {
    const free = await (async () => {
      for (;;) {
        const account = await gw.account("free");
        if (userShare(account.userId) > 0.85) return account;
      }
    })();
    const paid = await gw.account("pro");
    const east = gw.sim.backend("ramp-east");
    const west = gw.sim.backend("ramp-west");
    await east.configure({ fault: { type: "refuse" } });
    await west.configure({ fault: { type: "refuse" } });
    const down = await until("the pool to be seen down", async () => {
      const r = await streamTab(gw.openai({ apiKey: paid.apiKey }), "tab-ramp");
      return r.error?.message.includes("down") ? r.error : undefined;
    });
    expect(down.status).toBe(503);

    await east.configure({ fault: { type: "none" }, ttftMs: 200 });
    await west.configure({ fault: { type: "none" }, ttftMs: 200 });
    east.resetPeak();
    west.resetPeak();
    await until("paid traffic to be admitted again", async () => {
      const r = await streamTab(gw.openai({ apiKey: paid.apiKey }), "tab-ramp");
      return r.error ? undefined : r;
    });
    const refused = await streamTab(gw.openai({ apiKey: free.apiKey }), "tab-ramp");
    expect(refused.error?.status).toBe(503);
    expect(Number(refused.error?.headers?.get("retry-after"))).toBeGreaterThan(0);
    expect(refused.error?.message).toMatch(/recovering/);

    // A burst of paid requests while the backends are in slow start: shed, not piled on.
    const burst = await Promise.all(
      Array.from({ length: 12 }, () => streamTab(gw.openai({ apiKey: paid.apiKey }), "tab-ramp")),
    );
    expect(burst.some((r) => !r.error)).toBe(true);
    expect(east.peakConcurrency()).toBeLessThanOrEqual(3);
    expect(west.peakConcurrency()).toBeLessThanOrEqual(3);

    await until(
      "the ramp to admit everyone",
      async () => ((await streamTab(gw.openai({ apiKey: free.apiKey }), "tab-ramp")).error ? undefined : true),
      10_000,
    );
  });
});
