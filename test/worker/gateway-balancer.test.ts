import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GatewayConfig, HEARTBEAT_MS, userShare, type GatewayConfigInput } from "../../protocol/gateway.js";
import { Balancer, distanceKm } from "../../workers/gateway/balancer.js";
import { ConfigError } from "../../workers/config.js";
import { loadGateway, type ResolvedEndpoint, type ResolvedPool } from "../../workers/gateway/config.js";
import { FIM_TEMPLATES, foldPrediction, renderFim } from "../../workers/gateway/prompts.js";

const VIRGINIA = { latitude: 39.04, longitude: -77.49 };
const PHOENIX = { latitude: 33.45, longitude: -112.07 };
const LONDON = { latitude: 51.51, longitude: -0.13 };
const TOKYO = { latitude: 35.68, longitude: 139.69 };
const PARIS = { latitude: 48.86, longitude: 2.35 };

function endpoint(id: string, region: string, at: { latitude: number; longitude: number }, capacity = 4) {
  return { id, region, ...at, url: `http://${id}.test/v1`, kind: "vllm" as const, capacity };
}

function setup(input: Partial<GatewayConfigInput> = {}, pool: Record<string, unknown> = {}) {
  const config = GatewayConfig.parse({
    pools: {
      tab: {
        role: "tab",
        models: ["tab-model"],
        fim: "qwen2.5-coder",
        endpoints: [
          endpoint("use-1", "us-east", VIRGINIA),
          endpoint("use-2", "us-east", VIRGINIA),
          endpoint("usw-1", "us-west", PHOENIX),
          endpoint("euw-1", "eu-west", LONDON),
          endpoint("apne-1", "ap-northeast", TOKYO),
        ],
        ...pool,
      },
    },
    ...input,
  });
  const endpoints = new Map<string, ResolvedEndpoint>(
    config.pools.tab!.endpoints.map((e) => [
      e.id,
      { ...e, healthUrl: `http://${e.id}.test/health`, base: e.url, topClass: "tab" as const },
    ]),
  );
  const resolved: ResolvedPool = {
    ...config.pools.tab!,
    endpoints: [...endpoints.values()],
    name: "tab",
    spread: true,
  };
  return { config, pool: resolved, endpoints, balancer: new Balancer(config) };
}

describe("region selection", () => {
  it("reads the caller's location only for a pool whose endpoints sit at more than one place", () => {
    const tab = { role: "tab", models: ["tab-model"], fim: "qwen2.5-coder" };
    const gateway = loadGateway({
      GATEWAY_CONFIG: JSON.stringify({
        pools: {
          one: { ...tab, endpoints: [endpoint("use-1", "us-east", VIRGINIA), endpoint("use-2", "us-east", VIRGINIA)] },
          two: {
            ...tab,
            models: ["other"],
            endpoints: [
              { ...endpoint("use-3", "us-east", VIRGINIA), url: "http://use-3.test/v1//" },
              endpoint("euw-1", "eu-west", LONDON),
            ],
          },
        },
      }),
    } as unknown as Env)!;
    expect(gateway.pools.map((p) => [p.name, p.spread])).toEqual([
      ["one", false],
      ["two", true],
    ]);
    expect(gateway.endpoints.get("use-3")!.base).toBe("http://use-3.test/v1");
  });

  it("measures great-circle distances", () => {
    expect(distanceKm(VIRGINIA, VIRGINIA)).toBe(0);
    expect(distanceKm(LONDON, PARIS)).toBeGreaterThan(330);
    expect(distanceKm(LONDON, PARIS)).toBeLessThan(360);
    expect(distanceKm(VIRGINIA, TOKYO)).toBeGreaterThan(10_500);
  });

  it("orders regions nearest first from where the request comes from", () => {
    const { balancer, pool, endpoints } = setup();
    const regions = (from: typeof PARIS) => [...new Set(balancer.candidates(pool, from, 0).map((e) => e.region))];
    expect(regions(PARIS)).toEqual(["eu-west", "us-east", "us-west", "ap-northeast"]);
    expect(regions(TOKYO)).toEqual(["ap-northeast", "us-west", "eu-west", "us-east"]);
    expect(regions({ latitude: 37.77, longitude: -122.42 })[0]).toBe("us-west");
  });

  it("spreads load inside a region and spills to the next region when it is full", () => {
    const { balancer, pool, endpoints } = setup();
    const taken: string[] = [];
    for (let i = 0; i < 10; i++) {
      const e = balancer.acquire(pool, balancer.candidates(pool, VIRGINIA, 0), "tab", 0);
      taken.push(e!.id);
    }
    // Both Virginia endpoints fill up evenly (4 each), then Phoenix takes the overflow.
    expect(taken.slice(0, 8).sort()).toEqual(["use-1", "use-1", "use-1", "use-1", "use-2", "use-2", "use-2", "use-2"]);
    expect(taken.slice(8)).toEqual(["usw-1", "usw-1"]);
  });

  it("skips endpoints the health snapshot marks down or that this isolate ejected", () => {
    const { balancer, pool, endpoints } = setup({ health: { ejectAfterFailures: 2, ejectionMs: 1000 } });
    balancer.snapshot = { endpoints: { "use-1": { healthy: false, since: 0 } }, pools: {} };
    expect(balancer.candidates(pool, VIRGINIA, 0).map((e) => e.id)[0]).toBe("use-2");
    const peers = [...endpoints.values()];
    expect(balancer.failed(endpoints.get("use-2")!, 0, peers)).toBeUndefined();
    expect(balancer.failed(endpoints.get("use-2")!, 0, peers)).toBe(1000);
    expect(balancer.candidates(pool, VIRGINIA, 500)[0]!.region).toBe("us-west");
    // Back after the ejection on probation: one request at a time, and a single failure ejects it
    // again for twice as long.
    const use2 = endpoints.get("use-2")!;
    expect(balancer.candidates(pool, VIRGINIA, 1000)[0]!.id).toBe("use-2");
    expect(balancer.limit(use2, pool, "tab", 1000)).toBe(1);
    expect(balancer.failed(use2, 1000, peers)).toBe(3000);
    // A success ends probation.
    balancer.succeeded(use2);
    expect(balancer.limit(use2, pool, "tab", 40_000)).toBe(4);
  });
});

describe("one server in several pools", () => {
  /** One server (`gpu-1`) serving a tab model and a chat model: the pools name what each sends it. */
  function shared(chatEntry: Record<string, unknown> = {}) {
    const server = endpoint("gpu-1", "us-east", VIRGINIA, 2);
    return loadGateway({
      GATEWAY_CONFIG: JSON.stringify({
        pools: {
          tab: {
            role: "tab",
            models: ["tab-model"],
            fim: "qwen2.5-coder",
            endpoints: [{ ...server, model: "coder-base", checkpoint: "base@1" }],
          },
          chat: {
            role: "chat",
            models: ["chat-model"],
            endpoints: [{ ...server, model: "coder-instruct", checkpoint: "instruct@1", weight: 2, ...chatEntry }],
          },
        },
      }),
      POOL_KEY: "k",
    } as unknown as Env)!;
  }

  it("sends each pool's own model name and checkpoint, and shares the server's slots between the pools", () => {
    const gateway = shared();
    const balancer = new Balancer(gateway.config);
    const tab = gateway.poolFor("completions", "tab-model")!;
    const chat = gateway.poolFor("chat", "chat-model")!;
    const [forChat] = balancer.candidates(chat, VIRGINIA, 0);
    expect(forChat).toMatchObject({ id: "gpu-1", model: "coder-instruct", checkpoint: "instruct@1", weight: 2 });
    const [forTab] = balancer.candidates(tab, VIRGINIA, 0);
    expect(forTab).toMatchObject({ id: "gpu-1", model: "coder-base", checkpoint: "base@1", weight: 1 });
    // One server: probed once, serving the higher class of the two, its slots counted across both pools.
    expect([...gateway.endpoints.keys()]).toEqual(["gpu-1"]);
    expect([forChat!.topClass, forTab!.topClass]).toEqual(["tab", "tab"]);
    expect(balancer.acquire(tab, [forTab!], "tab", 0)).toBe(forTab);
    expect(balancer.acquire(chat, [forChat!], "chat", 0)).toBeUndefined();
    balancer.release(tab, forTab!);
    expect(balancer.acquire(chat, [forChat!], "chat", 0)).toBe(forChat);
  });

  it.each([
    ["url", { url: "http://gpu-2.test/v1" }],
    ["kind", { kind: "openai" }],
    ["region", { region: "us-east-2" }],
    ["latitude", { latitude: 40 }],
    ["longitude", { longitude: -80 }],
    ["capacity", { capacity: 3 }],
    ["secret", { secret: "POOL_KEY" }],
    ["health", { health: "http://gpu-1.test/ready" }],
  ])("refuses a configuration whose pools give one endpoint id another %s", (field, differs) => {
    expect(() => shared(differs)).toThrow(ConfigError);
    expect(() => shared(differs)).toThrow(
      new RegExp(`pools\\.chat\\.endpoints\\.0\\.${field}: endpoint id gpu-1 is one server, .*another ${field}`),
    );
  });
});

describe("capacity, classes and slow start", () => {
  it("gives lower classes a smaller share of each endpoint so they are shed first", () => {
    const { balancer, pool, endpoints } = setup({}, { endpoints: [endpoint("one", "us-east", VIRGINIA, 8)] });
    const one = endpoints.get("one")!;
    expect(balancer.limit(one, pool, "tab", 0)).toBe(8);
    expect(balancer.limit(one, pool, "chat", 0)).toBe(7);
    expect(balancer.limit(one, pool, "apply", 0)).toBe(6);
    expect(balancer.limit(one, pool, "background", 0)).toBe(4);
    for (let i = 0; i < 4; i++) expect(balancer.acquire(pool, [one], "background", 0)).toBe(one);
    expect(balancer.acquire(pool, [one], "background", 0)).toBeUndefined();
    expect(balancer.acquire(pool, [one], "apply", 0)).toBe(one);
    expect(balancer.acquire(pool, [one], "apply", 0)).toBe(one);
    expect(balancer.acquire(pool, [one], "apply", 0)).toBeUndefined();
    expect(balancer.acquire(pool, [one], "tab", 0)).toBe(one);
    expect(balancer.acquire(pool, [one], "tab", 0)).toBe(one);
    expect(balancer.acquire(pool, [one], "tab", 0)).toBeUndefined();
  });

  it("tells a request waiting for a slot that one was released, and one waiting too long that none was", async () => {
    const { balancer, pool, endpoints } = setup({}, { endpoints: [endpoint("one", "us-east", VIRGINIA, 1)] });
    const one = endpoints.get("one")!;
    expect(balancer.acquire(pool, [one], "tab", 0)).toBe(one);
    expect(await balancer.waitForSlot(10)).toBe(false);
    const waiting = balancer.waitForSlot(60_000);
    balancer.release(pool, one);
    expect(await waiting).toBe(true);
    const aborted = new AbortController();
    const cancelled = balancer.waitForSlot(60_000, aborted.signal);
    aborted.abort();
    expect(await cancelled).toBe(false);
  });

  it("lets a class use all of an endpoint that no higher class shares", () => {
    const { balancer, pool, endpoints } = setup({}, { endpoints: [endpoint("one", "us-east", VIRGINIA, 8)] });
    const embedOnly = { ...endpoints.get("one")!, topClass: "background" as const };
    expect(balancer.limit(embedOnly, pool, "background", 0)).toBe(8);
    const chatAndApply = { ...endpoints.get("one")!, topClass: "chat" as const };
    expect(balancer.limit(chatAndApply, pool, "chat", 0)).toBe(8);
    expect(balancer.limit(chatAndApply, pool, "apply", 0)).toBe(6);
  });

  it("ramps a recovered endpoint's capacity from a tenth to all over the slow-start window", () => {
    const { balancer, pool, endpoints } = setup({}, { recovery: { slowStartMs: 10_000 } });
    const e = endpoints.get("use-1")!;
    balancer.snapshot = { endpoints: { "use-1": { healthy: true, since: 100_000 } }, pools: {} };
    expect(balancer.slowStart(e, pool, 100_000)).toBeCloseTo(0.1);
    expect(balancer.slowStart(e, pool, 105_000)).toBeCloseTo(0.5);
    expect(balancer.slowStart(e, pool, 120_000)).toBe(1);
    // Tab always gets at least one slot; the property below checks the cap holds at every instant.
    expect(balancer.limit(e, pool, "tab", 100_000)).toBe(1);
  });

  it("never lets any class exceed an endpoint's capacity at any point of a recovery", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 0, max: 70_000 }),
        fc.constantFrom("tab", "chat", "apply", "background"),
        (capacity, slowStartMs, elapsed, cls) => {
          const { balancer, pool, endpoints } = setup(
            {},
            { endpoints: [endpoint("x", "us-east", VIRGINIA, capacity)], recovery: { slowStartMs } },
          );
          balancer.snapshot = { endpoints: { x: { healthy: true, since: 1_000 } }, pools: {} };
          const x = endpoints.get("x")!;
          let admitted = 0;
          while (balancer.acquire(pool, [x], cls, 1_000 + elapsed)) admitted++;
          return admitted <= capacity && admitted >= (cls === "tab" ? 1 : 0);
        },
      ),
    );
  });

  it("admits paid tiers during a recovery ramp and a growing share of free users", () => {
    const { balancer, pool } = setup({}, { recovery: { rampMs: 10_000 } });
    balancer.snapshot = { endpoints: {}, pools: { tab: { down: false, outageEndedAt: 50_000 } } };
    const users = Array.from({ length: 2000 }, (_, i) => `user-${i}`);
    const share = (at: number) => users.filter((u) => balancer.admitRamp(pool, u, false, at).ok).length / users.length;
    expect(users.every((u) => balancer.admitRamp(pool, u, true, 50_000).ok)).toBe(true);
    expect(share(50_000)).toBe(0);
    expect(share(52_500)).toBeCloseTo(0.25, 1);
    expect(share(57_500)).toBeCloseTo(0.75, 1);
    expect(share(60_000)).toBe(1);
    // A user admitted once stays admitted as the ramp grows.
    const early = users.filter((u) => balancer.admitRamp(pool, u, false, 53_000).ok);
    expect(early.every((u) => balancer.admitRamp(pool, u, false, 56_000).ok)).toBe(true);
    expect(balancer.admitRamp(pool, users.find((u) => userShare(u) < 0.1)!, false, 55_000)).toEqual({
      ok: true,
      capacityShare: 0.5,
    });
    expect(balancer.admitRamp(pool, "anyone", true, 55_000)).toEqual({ ok: true, capacityShare: 1 });
    const refused = balancer.admitRamp(pool, users.find((u) => userShare(u) > 0.9)!, false, 52_000);
    expect(refused).toEqual({ ok: false, reason: "ramp", retryAfterSeconds: 8 });
  });

  it("heartbeats every 20 ms by default, at a pool's own interval within 5 ms to 10 s otherwise", () => {
    expect(setup().pool.heartbeatMs).toBe(HEARTBEAT_MS);
    expect(setup({}, { heartbeatMs: 250 }).pool.heartbeatMs).toBe(250);
    for (const heartbeatMs of [0, 4, 10_001, 12.5]) expect(() => setup({}, { heartbeatMs })).toThrow(/heartbeatMs/);
  });

  it("refuses a pool in total outage", () => {
    const { balancer, pool } = setup();
    balancer.snapshot = { endpoints: {}, pools: { tab: { down: true, outageEndedAt: null } } };
    expect(balancer.admitRamp(pool, "u", true, 0)).toMatchObject({ ok: false, reason: "pool_down" });
  });

  it("earns retries as a share of recent requests and spends them on failovers", () => {
    const { balancer, pool } = setup({}, { retries: { budgetRatio: 0.2, minRetries: 2 } });
    // At first, minRetries.
    expect(balancer.takeRetry(pool, 0)).toBe(true);
    expect(balancer.takeRetry(pool, 0)).toBe(true);
    expect(balancer.takeRetry(pool, 0)).toBe(false);
    // 100 requests earn 20 retries: a burst of failovers as large as a fifth of the recent traffic.
    for (let i = 0; i < 100; i++) balancer.earnRetry(pool, 10 + i);
    let taken = 0;
    while (balancer.takeRetry(pool, 200)) taken++;
    expect(taken).toBe(19);
    // Retries do not earn retries: the budget stays empty until new requests come.
    expect(balancer.takeRetry(pool, 300)).toBe(false);
  });

  it("never ejects the last routable endpoint of a pool on real traffic alone", () => {
    const { balancer, endpoints } = setup({ health: { ejectAfterFailures: 1, ejectionMs: 1000 } });
    const peers = [...endpoints.values()];
    for (const e of peers.slice(1)) expect(balancer.failed(e, 0, peers)).toBe(1000);
    expect(balancer.failed(peers[0]!, 0, peers)).toBeUndefined();
    expect(balancer.routable(peers[0]!, 1)).toBe(true);
  });
});

describe("FIM templates", () => {
  const body = { model: "m", prompt: "def add(a, b):\n    ", suffix: "\n\nprint(add(1, 2))", max_tokens: 16 };
  it.each([
    ["qwen2.5-coder", "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))<|fim_middle|>"],
    ["deepseek-coder", "<｜fim▁begin｜>def add(a, b):\n    <｜fim▁hole｜>\n\nprint(add(1, 2))<｜fim▁end｜>"],
    ["starcoder2", "<fim_prefix>def add(a, b):\n    <fim_suffix>\n\nprint(add(1, 2))<fim_middle>"],
    ["codellama", "<PRE> def add(a, b):\n     <SUF>\n\nprint(add(1, 2)) <MID>"],
    ["codestral", "[SUFFIX]\n\nprint(add(1, 2))[PREFIX]def add(a, b):\n    "],
  ] as const)("%s renders prompt and suffix into one prompt and drops suffix", (family, prompt) => {
    const rendered = renderFim({ ...body, stop: ["\n\n"] }, family);
    expect(rendered.prompt).toBe(prompt);
    expect(rendered).not.toHaveProperty("suffix");
    expect(rendered.max_tokens).toBe(16);
    expect(rendered.stop).toEqual(["\n\n", ...FIM_TEMPLATES[family].stop]);
  });

  it("leaves a plain completion (no suffix) alone", () => {
    expect(renderFim({ model: "m", prompt: "x" }, "qwen2.5-coder")).toEqual({ model: "m", prompt: "x" });
  });
});

describe("apply with prediction", () => {
  const original = "function add(a, b) {\n  return a + b;\n}";
  it("appends the predicted text to the last user message for servers without `prediction`", () => {
    const folded = foldPrediction({
      model: "m",
      messages: [
        { role: "system", content: "Apply the edit." },
        { role: "user", content: "Rename add to sum." },
      ],
      prediction: { type: "content", content: original },
    });
    expect(folded).not.toHaveProperty("prediction");
    const messages = folded.messages as { role: string; content: string }[];
    expect(messages).toHaveLength(2);
    expect(messages[1]!.content).toContain("Rename add to sum.");
    expect(messages[1]!.content).toContain(original);
  });

  it("does not repeat text the prompt already carries, and accepts text parts", () => {
    const messages = [{ role: "user", content: `Rename add to sum in:\n${original}` }];
    const folded = foldPrediction({
      model: "m",
      messages,
      prediction: { type: "content", content: [{ type: "text", text: original }] },
    });
    expect(folded.messages).toEqual(messages);
  });
});
