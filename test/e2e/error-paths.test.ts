import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SYNC_PROTOCOL, VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import type { Fault } from "../../gpu-backends/simulator/simulator.js";
import type { GatewayConfigInput } from "../../protocol/gateway.js";
import { startOpenAIStandIn, type OpenAIStandIn } from "../support/openai-standin.js";
import { VIRGINIA, startGateway, type GatewayFixture } from "../support/gateway.js";

/**
 * Backends that do not answer in time, behind the real local edge: simulated GPU backends (stand-ins
 * for vLLM) that hang, each alone in a chat pool so that nothing fails over, and the OpenAI-compatible
 * embeddings stand-in timing out. What the client sees is checked: a 504
 * `upstream_timeout` problem before the response has started, the same code in the stream's one
 * `event: error` after it has.
 */
const HANGS: Record<string, Fault> = {
  // No response headers at all.
  "before-headers": { type: "hangBeforeHeaders" },
  // Headers, then not a single token.
  "before-first-token": { type: "hangMidStream", afterTokens: 0 },
  // Two tokens, then silence.
  "mid-stream": { type: "hangMidStream", afterTokens: 2 },
};

/**
 * Short, so that each case gives up quickly; the simulated tokens come every 5 ms, far inside them.
 * The mid-stream case waits longer for its first token, so that a busy machine cannot turn its
 * silence after two tokens into a first token's timeout.
 */
const TIMEOUTS = { connectMs: 500, firstByteMs: 500, gapMs: 1_000, deadlineMs: 10_000 };
const timeoutsOf = (name: string) => (name === "mid-stream" ? { ...TIMEOUTS, firstByteMs: 5_000 } : TIMEOUTS);
const EMBED_MODEL = "standin-embed-768";

function config(urls: Record<string, string>): GatewayConfigInput {
  const pools: GatewayConfigInput["pools"] = {};
  for (const name of Object.keys(HANGS))
    pools[name] = {
      role: "chat",
      models: [`chat-${name}`],
      endpoints: [
        { id: name, region: "us-east", ...VIRGINIA, url: urls[name]!, model: "sim-coder", kind: "vllm", capacity: 8 },
      ],
      timeouts: timeoutsOf(name),
    };
  // Every case fails its one endpoint a few times: none may be ejected, which would answer 503 instead.
  return { pools, health: { probeIntervalMs: 250, probeTimeoutMs: 200, ejectAfterFailures: 100 } };
}

/** A chat request's body to pool `name`'s model. */
const chat = (name: string, stream: boolean) => ({
  model: `chat-${name}`,
  messages: [{ role: "user", content: "Say something." }],
  max_tokens: 8,
  stream,
});

/** The problem document of a response that must be a 504 `upstream_timeout`. */
async function expectTimeoutProblem(response: Response): Promise<{ detail: string }> {
  const text = await response.text();
  expect(response.status, text).toBe(504);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  const problem = JSON.parse(text) as { status: number; code: string; type: string; detail: string };
  expect(problem).toMatchObject({ status: 504, code: "upstream_timeout", type: "/errors/upstream_timeout" });
  return problem;
}

/** A streamed answer read whole: its content deltas and its events named `error`. */
async function readStream(response: Response): Promise<{ content: string; errors: unknown[]; done: boolean }> {
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const text = await response.text();
  let content = "";
  const errors: unknown[] = [];
  let done = false;
  for (const block of text.split("\n\n")) {
    const lines = block.split("\n");
    const data = lines.find((l) => l.startsWith("data: "))?.slice(6);
    if (data === undefined) continue;
    if (data === "[DONE]") done = true;
    else if (lines.includes("event: error")) errors.push(JSON.parse(data));
    else
      content +=
        (JSON.parse(data) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? "";
  }
  return { content, errors, done };
}

describe("backends that do not answer in time", () => {
  let gw: GatewayFixture;
  let embeddings: OpenAIStandIn;

  beforeAll(async () => {
    embeddings = await startOpenAIStandIn();
    gw = await startGateway(
      Object.entries(HANGS).map(([id, fault]) => ({ id, models: ["sim-coder"], tokensPerSecond: 200, fault })),
      config,
      {
        EMBEDDER: "openai",
        EMBEDDING_BASE_URL: embeddings.url,
        EMBEDDING_MODEL: EMBED_MODEL,
        EMBEDDING_API_KEY: embeddings.apiKey,
      },
    );
  }, 120_000);
  afterAll(async () => {
    await gw?.stop();
    await embeddings?.close();
  });

  it("answers 504 `upstream_timeout` when the backend sends no headers, streamed or not", async () => {
    const whole = await expectTimeoutProblem(await gw.post("/chat/completions", chat("before-headers", false)));
    expect(whole.detail).toMatch(/sent no response headers within 1000 ms/);
    const streamed = await expectTimeoutProblem(await gw.post("/chat/completions", chat("before-headers", true)));
    expect(streamed.detail).toMatch(/sent no response headers within 500 ms/);
  });

  it("ends a stream whose backend sends no first token with one `upstream_timeout` error event", async () => {
    const { content, errors, done } = await readStream(
      await gw.post("/chat/completions", chat("before-first-token", true)),
    );
    expect(content).toBe("");
    expect(done).toBe(false);
    expect(errors).toEqual([
      {
        code: "upstream_timeout",
        error: expect.objectContaining({
          type: "server_error",
          code: null,
          message: expect.stringMatching(/sent no token within 500 ms/),
        }),
      },
    ]);
  });

  it("ends a stream whose backend falls silent mid-answer with one `upstream_timeout` error event", async () => {
    const { content, errors, done } = await readStream(await gw.post("/chat/completions", chat("mid-stream", true)));
    // What came before the silence reached the client; the end says the answer is incomplete.
    expect(content.length).toBeGreaterThan(0);
    expect(done).toBe(false);
    expect(errors).toEqual([
      {
        code: "upstream_timeout",
        error: expect.objectContaining({
          type: "server_error",
          code: null,
          message: expect.stringMatching(/sent nothing for 1000 ms\. The stream is incomplete\./),
        }),
      },
    ]);
  });

  it("answers a search 504 `upstream_timeout` when the embedding service times out", async () => {
    const headers = { "content-type": "application/json", authorization: `Bearer ${gw.apiKey}` };
    const created = await fetch(`${gw.edge.baseURL}/v1/workspaces`, {
      method: "POST",
      headers,
      body: JSON.stringify({ name: "timeouts" }),
    });
    expect(created.status, await created.clone().text()).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const vectorKey = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
    // The service's own timeout (HTTP 408) on every try, the SDK's retries included.
    embeddings.failNext(Infinity, 408);
    try {
      const search = await fetch(`${gw.edge.baseURL}/v1/workspaces/${id}/search`, {
        method: "POST",
        headers: { ...headers, [VECTOR_KEY_HEADER]: vectorKey },
        body: JSON.stringify({ protocol: SYNC_PROTOCOL, query: "where are keys revoked" }),
      });
      const problem = await expectTimeoutProblem(search);
      expect(problem.detail).toMatch(/timed out \(HTTP 408, 3 attempts\)/);
    } finally {
      embeddings.reset();
    }
    expect(embeddings.requests.filter((r) => r.status === 408)).toHaveLength(3);
  });
});
