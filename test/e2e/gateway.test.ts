import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Sextant } from "../../client/sdk/client.js";
import { TabSession } from "../../client/sdk/tab-session.js";
import { parquetFilesUnder, scanDirectoryFor } from "../support/storage-scan.js";
import { LONDON, VIRGINIA, sleep, startGateway, until, type GatewayFixture } from "../support/gateway.js";

/** A streamed tab completion of three tokens, for the tests that read the raw SSE. */
const SHORT_TAB_STREAM = { model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 3, stream: true };

const POOL_SECRET = "pool-secret-0123456789abcdef";

/**
 * The official `openai` SDK, unchanged, through the real local edge to simulated GPU backends
 * (stand-ins for vLLM: they speak its protocol and say they are simulated).
 */
describe("the inference gateway with the openai SDK", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    gw = await startGateway(
      [
        { id: "east", models: ["sim-coder", "sim-chat", "sim-embed"], apiKey: POOL_SECRET, tokensPerSecond: 100 },
        { id: "west", models: ["sim-coder", "sim-chat", "sim-embed"], apiKey: POOL_SECRET, tokensPerSecond: 100 },
      ],
      (urls) => {
        const endpoints = (model: string, kind: "vllm" | "openai" = "vllm", suffix = "") => [
          {
            id: `east${suffix}`,
            region: "us-east",
            ...VIRGINIA,
            url: urls.east!,
            model,
            kind,
            capacity: 16,
            secret: "SIM_POOL_KEY",
          },
          {
            id: `west${suffix}`,
            region: "eu-west",
            ...LONDON,
            url: urls.west!,
            model,
            kind,
            capacity: 16,
            secret: "SIM_POOL_KEY",
          },
        ];
        // Every pool lists the same two servers (ids east and west), each pool with its own model name.
        return {
          pools: {
            tab: { role: "tab", models: ["tab-sim"], fim: "qwen2.5-coder", endpoints: endpoints("sim-coder") },
            chat: { role: "chat", models: ["chat-sim"], endpoints: endpoints("sim-chat") },
            // A slower heartbeat than the default: the quiet-stream test compares the two.
            apply: { role: "apply", models: ["apply-sim"], endpoints: endpoints("sim-coder"), heartbeatMs: 150 },
            "apply-openai": {
              role: "apply",
              models: ["apply-openai-sim"],
              endpoints: endpoints("sim-coder", "openai", "-openai"),
            },
            embed: { role: "embed", models: ["embed-sim"], endpoints: endpoints("sim-embed") },
          },
          health: { probeIntervalMs: 500, snapshotMaxAgeMs: 200 },
        };
      },
      {
        SIM_POOL_KEY: POOL_SECRET,
        // Pro keys may have two tab requests in flight: the abort test checks the slots come back.
        RATE_LIMITS: JSON.stringify({
          plans: {
            pro: {
              tab: { key: { requests: { limit: 100_000, windowSeconds: 60 }, concurrency: 2 } },
              // Pro keys may spend 60 chat tokens a minute: the metering test of the token limit.
              chat: {
                key: { requests: { limit: 100_000, windowSeconds: 60 }, tokens: { limit: 60, windowSeconds: 60 } },
              },
            },
          },
        }),
      },
    );
  });
  afterAll(async () => gw?.stop());
  beforeEach(async () => {
    for (const b of gw.sim.backends) {
      await b.configure({ fault: { type: "none" }, ttftMs: 20 });
      b.clear();
    }
  });

  const generations = () =>
    gw.sim.backends.flatMap((b) => b.records()).filter((r) => r.method === "POST" && r.path.startsWith("/v1/"));

  it("renders tab's prompt and suffix into the pool's FIM template, sends the pool secret and not the client's key", async () => {
    const completion = await gw.openai().completions.create({
      model: "tab-sim",
      prompt: "def add(a, b):\n    ",
      suffix: "\n\nprint(add(1, 2))",
      max_tokens: 5,
    });
    expect(completion.model).toBe("tab-sim");
    expect(completion.choices[0]!.text).toBe("sim0 sim1 sim2 sim3 sim4 ");
    expect(completion.usage).toMatchObject({ completion_tokens: 5 });
    const [record] = generations();
    expect(record!.backend).toBe("east"); // nearest to the default location (Virginia)
    const body = record!.body as Record<string, unknown>;
    expect(body.prompt).toBe("<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))<|fim_middle|>");
    expect(body).not.toHaveProperty("suffix");
    expect(body.model).toBe("sim-coder");
    expect(record!.authorization).toBe(`Bearer ${POOL_SECRET}`);
    expect(JSON.stringify(record!.headers)).not.toContain(gw.apiKey);
  });

  it("streams chat completions event by event, with usage when asked", async () => {
    // Each token 150 ms after the one before: an edge that buffered would deliver nothing before the last.
    for (const b of gw.sim.backends) await b.configure({ fault: { type: "slowDrip", intervalMs: 150 } });
    const stream = await gw.openai().chat.completions.create({
      model: "chat-sim",
      messages: [{ role: "user", content: "Say something." }],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    const arrivals: number[] = [];
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      arrivals.push(performance.timeOrigin + performance.now());
      expect(chunk.model).toBe("chat-sim");
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("sim0 sim1 sim2 sim3 sim4 sim5 sim6 sim7 ");
    expect(usage).toMatchObject({ completion_tokens: 8 });
    // Forwarded as they arrive: the first token reached the client before the backend had sent its
    // last one (the same clock: the simulated backends run in this process).
    const [record] = generations();
    expect((record!.body as { model: string }).model).toBe("sim-chat");
    expect(record!.endedAt).toBeGreaterThanOrEqual(record!.receivedAt);
    expect(arrivals[1]!).toBeLessThan(record!.endedAt!);
  });

  it("leaves the usage chunk out of a stream that did not ask for it", async () => {
    const stream = await gw.openai().chat.completions.create({
      model: "chat-sim",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 3,
      stream: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(chunks.every((c) => !c.usage)).toBe(true);
    // The edge still asked the backend for usage, to meter it.
    expect((generations()[0]!.body as { stream_options?: unknown }).stream_options).toEqual({ include_usage: true });
  });

  it("folds apply's prediction into the prompt for vLLM pools and passes it on to OpenAI-compatible ones", async () => {
    const original = "export function add(a: number, b: number) {\n  return a + b;\n}";
    const request = (model: string) =>
      gw.openai().chat.completions.create({
        model,
        messages: [{ role: "user", content: "Rename add to sum." }],
        prediction: { type: "content", content: original },
        max_tokens: 4,
      });
    await request("apply-sim");
    await request("apply-openai-sim");
    const [vllm, openai] = generations();
    const folded = vllm!.body as { prediction?: unknown; messages: { content: string }[] };
    expect(folded.prediction).toBeUndefined();
    expect(folded.messages.at(-1)!.content).toContain(original);
    const passed = openai!.body as { prediction?: unknown; messages: { content: string }[] };
    expect(passed.prediction).toEqual({ type: "content", content: original });
    expect(passed.messages.at(-1)!.content).toBe("Rename add to sum.");
  });

  it("serves embeddings (the SDK's default base64 and floats) and lists the public models", async () => {
    const client = gw.openai();
    const b64 = await client.embeddings.create({ model: "embed-sim", input: ["alpha", "beta"] });
    expect(b64.data).toHaveLength(2);
    expect(b64.data[0]!.embedding).toHaveLength(16);
    const floats = await client.embeddings.create({ model: "embed-sim", input: "alpha", encoding_format: "float" });
    expect(floats.data[0]!.embedding[0]).toBeCloseTo(b64.data[0]!.embedding[0]!, 5);
    expect(generations().map((r) => (r.body as { model: string }).model)).toEqual(["sim-embed", "sim-embed"]);
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    expect(models.sort()).toEqual(["apply-openai-sim", "apply-sim", "chat-sim", "embed-sim", "tab-sim"]);
  });

  it("keeps a quiet stream alive with SSE comments the SDK ignores, and names the backend that served it", async () => {
    // 5 tokens/s: 200 ms between tokens, ten times the heartbeat interval.
    await gw.sim.backend("east").configure({ tokensPerSecond: 5 });
    try {
      const raw = await gw.post("/completions", SHORT_TAB_STREAM);
      const text = await raw.text();
      const named = text.indexOf(": backend=east region=us-east\n\n");
      expect(named).toBeGreaterThanOrEqual(0);
      expect(named).toBeLessThan(text.indexOf("data: "));
      const comments = (body: string) => body.split("\n").filter((line) => line === ":").length;
      expect(comments(text)).toBeGreaterThan(3);
      expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);

      // The apply pool's heartbeat is 150 ms: at most one comment in each 200 ms gap.
      const slow = await gw.post("/chat/completions", {
        model: "apply-sim",
        messages: [{ role: "user", content: "apply" }],
        max_tokens: 3,
        stream: true,
      });
      const slowText = await slow.text();
      expect(slowText.trimEnd().endsWith("data: [DONE]")).toBe(true);
      expect(comments(slowText)).toBeGreaterThanOrEqual(1);
      expect(comments(slowText)).toBeLessThan(comments(text));
      expect(comments(slowText)).toBeLessThanOrEqual(4);

      const stream = await gw
        .openai()
        .completions.create({ model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 3, stream: true });
      let completion = "";
      for await (const chunk of stream) completion += chunk.choices[0]?.text ?? "";
      expect(completion).toBe("sim0 sim1 sim2 ");
    } finally {
      await gw.sim.backend("east").configure({ tokensPerSecond: 100 });
    }
  });

  it("ends a stream that every backend accepted and then failed with one error event the SDK raises", async () => {
    for (const b of gw.sim.backends) await b.configure({ fault: { type: "malformedSse", afterTokens: 0 } });
    const raw = await gw.post("/completions", SHORT_TAB_STREAM);
    // The response began when the first backend accepted the request.
    expect(raw.status).toBe(200);
    const text = await raw.text();
    const errors = text.split("\n\n").filter((event) => event.startsWith("event: error\n"));
    expect(errors).toHaveLength(1);
    const error = JSON.parse(errors[0]!.split("\ndata: ")[1]!) as {
      code: string;
      error: { type: string; code: string | null; message: string };
    };
    // Sextant's code, and OpenAI's values in the envelope the SDK raises.
    expect(error.code).toBe("upstream_failure");
    expect(error.error).toMatchObject({ type: "server_error", code: null });
    expect(error.error.message).toContain("malformed");
    expect(text).not.toContain("data: [DONE]");
    expect(generations().length).toBeGreaterThanOrEqual(2);

    const stream = await gw
      .openai()
      .completions.create({ model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 3, stream: true });
    await expect(
      (async () => {
        for await (const _ of stream) void _;
      })(),
    ).rejects.toThrow(/malformed/);
  });

  it("aborts the upstream request when the SDK aborts a stream", async () => {
    await gw.sim.backend("east").configure({ tokensPerSecond: 5 });
    const controller = new AbortController();
    const stream = await gw
      .openai()
      .chat.completions.create(
        { model: "chat-sim", messages: [{ role: "user", content: "long" }], max_tokens: 100, stream: true },
        { signal: controller.signal },
      );
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    controller.abort();
    // The SDK ends an aborted stream's iteration.
    await iterator.next().catch(() => undefined);
    const record = await until("the backend to see the abort", () => generations().find((r) => r.abortedAt));
    expect(record.outcome).toBe("aborted");
    await gw.sim.backend("east").configure({ tokensPerSecond: 100 });
  });

  it("gives a tab concurrency slot back when the client aborts its stream", async () => {
    await gw.sim.backend("east").configure({ tokensPerSecond: 5 });
    const account = await gw.account("pro");
    const client = gw.openai({ apiKey: account.apiKey });
    for (let i = 0; i < 5; i++) {
      const controller = new AbortController();
      const stream = await client.completions.create(
        { model: "tab-sim", prompt: "x", suffix: "", max_tokens: 50, stream: true },
        { signal: controller.signal },
      );
      const iterator = stream[Symbol.asyncIterator]();
      await iterator.next();
      controller.abort();
      await iterator.next().catch(() => undefined);
      // The edge notices at its next write; then the slot is free again.
      await until(
        "the backend to see the abort",
        () => generations().filter((r) => r.abortedAt).length === i + 1 || undefined,
      );
    }
    const third = await client.completions.create({ model: "tab-sim", prompt: "y", suffix: "", max_tokens: 1 });
    expect(third.choices).toHaveLength(1);
    await gw.sim.backend("east").configure({ tokensPerSecond: 100 });
  });

  it("cancels the older in-flight tab request of an editor session when a newer one arrives", async () => {
    await gw.sim.backend("east").configure({ ttftMs: 1_500 });
    const client = gw.openai({ defaultHeaders: { "X-Sextant-Session": "editor-1" } });
    const older = client.completions.create({ model: "tab-sim", prompt: "a", suffix: "", max_tokens: 2 });
    const olderOutcome = older.then(
      () => "answered",
      (err: unknown) => err,
    );
    await until("the older request to reach the backend", () => generations().length === 1 || undefined);
    await gw.sim.backend("east").configure({ ttftMs: 20 });
    const newer = await client.completions.create({ model: "tab-sim", prompt: "ab", suffix: "", max_tokens: 2 });
    expect(newer.choices[0]!.text).toBe("sim0 sim1 ");
    const first = await until("the backend to see the cancellation", () => generations().find((r) => r.abortedAt));
    expect((first.body as { prompt: string }).prompt).toContain("a<|fim_suffix|>");
    expect(await olderOutcome).toBeInstanceOf(OpenAI.APIError);
  });

  it("lets the SDK's tab session cancel its superseded request, client and upstream", async () => {
    await gw.sim.backend("east").configure({ ttftMs: 1_500 });
    const session = new TabSession(gw.openai());
    const older = session
      .complete({ model: "tab-sim", prompt: "a", suffix: "", max_tokens: 2 })
      .catch((e: unknown) => e);
    await until("the older request to reach the backend", () => generations().length === 1 || undefined);
    await gw.sim.backend("east").configure({ ttftMs: 20 });
    const newer = await session.complete({ model: "tab-sim", prompt: "ab", suffix: "", max_tokens: 2 });
    expect(newer.choices[0]!.text).toBe("sim0 sim1 ");
    expect(await older).toBeInstanceOf(OpenAI.APIUserAbortError);
    const cancelled = await until("the backend to see the cancellation", () => generations().find((r) => r.abortedAt));
    expect((cancelled.body as { prompt: string }).prompt).toContain("a<|fim_suffix|>");
    expect(generations().map((r) => r.headers["x-sextant-session"])).toEqual([undefined, undefined]);
  });

  it("answers bad requests with problem+json errors the SDK understands", async () => {
    await expect(gw.openai({ apiKey: "sxt_not-a-real-key" }).models.list()).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    const unknown = await gw
      .openai()
      .chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] })
      .catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as InstanceType<typeof OpenAI.APIError>).message).toContain("No model named no-such-model");
    const invalid = await gw
      .openai()
      .chat.completions.create({ model: "chat-sim", messages: [] })
      .catch((err: unknown) => err);
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect((invalid as InstanceType<typeof OpenAI.APIError>).headers?.get("content-type")).toBe(
      "application/problem+json",
    );
    const batch = await gw.post("/completions", { model: "tab-sim", prompt: ["a", "b"] });
    expect(batch.status).toBe(400);
    expect(generations()).toHaveLength(0);
  });

  it("meters prompt and completion tokens per key and model, streamed usage included", async () => {
    const account = await gw.account("pro");
    const client = gw.openai({ apiKey: account.apiKey });
    let prompt = 0;
    let completion = 0;
    for (let i = 0; i < 3; i++) {
      const c = await client.completions.create({
        model: "tab-sim",
        prompt: "x".repeat(40 * (i + 1)),
        suffix: "",
        max_tokens: 3,
      });
      prompt += c.usage!.prompt_tokens;
      completion += c.usage!.completion_tokens;
    }
    const stream = await client.chat.completions.create({
      model: "chat-sim",
      messages: [{ role: "user", content: "y".repeat(100) }],
      max_tokens: 6,
      stream: true,
    });
    for await (const _ of stream) void _;
    const streamed = generations().at(-1)!;
    expect(streamed.outcome).toBe("completed");
    const sextant = new Sextant({ apiKey: account.apiKey, baseURL: gw.edge.baseURL });
    const report = await until("usage to be flushed", async () => {
      const r = await sextant.usage({ groupBy: ["model"] });
      return r.totals.requests === 4 ? r : undefined;
    });
    const tab = report.rows.find((r) => r.model === "tab-sim")!;
    expect(tab).toMatchObject({ requests: 3, promptTokens: prompt, completionTokens: completion });
    const chat = report.rows.find((r) => r.model === "chat-sim")!;
    expect(chat).toMatchObject({ requests: 1, completionTokens: 6, promptTokens: 25 });
  });

  it("keeps no prompt, completion, pool secret or client key in storage or logs", async () => {
    const code = "function reconcileLedgerEntriesAcrossShards(ledger) { return ledger.entries; }";
    const stream = await gw.openai().chat.completions.create({
      model: "chat-sim",
      messages: [{ role: "user", content: `Explain:\n${code}` }],
      max_tokens: 4,
      stream: true,
    });
    for await (const _ of stream) void _;
    await gw.openai().completions.create({ model: "tab-sim", prompt: code, suffix: "}", max_tokens: 2 });
    // The requests' records have reached the lake, whose Parquet files the scan decodes.
    await until("the lake's first file", async () => parquetFilesUnder(gw.edge.persistTo) > 0 || undefined);
    const needles = ["reconcileLedgerEntriesAcrossShards", POOL_SECRET, gw.apiKey];
    expect(await scanDirectoryFor(gw.edge.persistTo, needles)).toEqual([]);
    for (const needle of needles) expect(gw.edge.output()).not.toContain(needle);
  });

  it("charges chat tokens from metered usage and refuses once the token limit is spent", async () => {
    const account = await gw.account("pro");
    const client = gw.openai({ apiKey: account.apiKey });
    let spent = 0;
    let refusal: InstanceType<typeof OpenAI.APIError> | undefined;
    const fields: (string | null)[][] = [];
    for (let i = 0; i < 10 && !refusal; i++) {
      try {
        const { data: c, response } = await client.chat.completions
          .create({
            model: "chat-sim",
            messages: [{ role: "user", content: "x".repeat(16) }],
            max_tokens: 16,
          })
          .withResponse();
        fields.push([response.headers.get("ratelimit-policy"), response.headers.get("ratelimit")]);
        spent += c.usage!.total_tokens;
      } catch (err) {
        if (!(err instanceof OpenAI.APIError)) throw err;
        refusal = err;
      }
      await sleep(100); // the charge is settled off the request's path
    }
    // Each request reserves its prompt (20 characters, 7 tokens) and max_tokens (16) up front.
    const reserve = 7 + 16;
    expect(refusal?.status).toBe(429);
    expect(refusal?.message).toMatch(/60 chat tokens per minute per API key\. This request reserves 23 tokens/);
    const left = Number(refusal?.headers?.get("ratelimit")?.match(/^"chat-tokens-key";r=(\d+);t=\d+$/)?.[1]);
    expect(left).toBeLessThan(reserve);
    // Admitted answers carry the fields too, read after the backend call.
    expect(fields.length).toBeGreaterThan(0);
    for (const [policy, field] of fields) {
      expect(policy).toContain('"chat-tokens-key";q=60;w=60');
      expect(field).toMatch(/^"[a-z-]+";r=\d+;t=\d+$/);
    }
    // Refused once what is left cannot cover a reservation, and never past the limit.
    expect(spent).toBeGreaterThan(60 - reserve);
    expect(spent).toBeLessThanOrEqual(60);
  });

  it("fails over to the other region when the nearest one refuses connections", async () => {
    await gw.sim.backend("east").configure({ fault: { type: "refuse" } });
    const completion = await gw
      .openai()
      .completions.create({ model: "tab-sim", prompt: "x", suffix: "", max_tokens: 2 });
    expect(completion.choices[0]!.text).toBe("sim0 sim1 ");
    expect(generations().map((r) => r.backend)).toEqual(["west"]);
    await sleep(10);
  });
});
