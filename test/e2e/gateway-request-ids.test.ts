import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startGateway, sleep, VIRGINIA, type GatewayFixture } from "../support/gateway.js";

const MINTED = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const POOL_SECRET = "pool-secret-0123456789abcdef";

/**
 * The gateway's answers through the official `openai` SDK against the real local edge (simulated
 * GPU backends, stand-ins for vLLM): every one carries `X-Request-Id`, streamed or whole, the
 * client's own id when it sent a well-formed one, and the same id reaches the backend; refusals
 * carry OpenAI's error `type` and `code`.
 */
describe("request ids and OpenAI's errors on the gateway", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    gw = await startGateway(
      [{ id: "east", models: ["sim-coder", "sim-embed"], apiKey: POOL_SECRET, tokensPerSecond: 200 }],
      (urls) => {
        const endpoints = (model: string) => [
          {
            id: "east",
            region: "us-east",
            ...VIRGINIA,
            url: urls.east!,
            model,
            kind: "vllm" as const,
            capacity: 16,
            secret: "SIM_POOL_KEY",
          },
        ];
        return {
          pools: {
            tab: { role: "tab", models: ["tab-sim"], fim: "qwen2.5-coder", endpoints: endpoints("sim-coder") },
            chat: { role: "chat", models: ["chat-sim"], endpoints: endpoints("sim-coder") },
            embed: { role: "embed", models: ["embed-sim"], endpoints: endpoints("sim-embed") },
          },
        };
      },
      {
        SIM_POOL_KEY: POOL_SECRET,
        // Pro keys may spend 40 chat tokens a minute: the tokens limit's refusal (the edge's own key is business).
        RATE_LIMITS: JSON.stringify({
          plans: { pro: { chat: { key: { tokens: { limit: 40, windowSeconds: 60 } } } } },
        }),
      },
    );
  });

  afterAll(async () => {
    await gw?.stop();
  });

  /** The id the backend was sent with the latest request. */
  const forwarded = () => gw.sim.backends.flatMap((b) => b.records()).at(-1)?.headers["x-request-id"];

  const chat = { model: "chat-sim", messages: [{ role: "user" as const, content: "hi" }], max_tokens: 3 };
  const calls: [string, (sdk: OpenAI, id?: string) => Promise<{ request_id: string | null; response: Response }>][] = [
    ["chat", (sdk, id) => sdk.chat.completions.create(chat, headers(id)).withResponse()],
    [
      "chat, streamed",
      (sdk, id) => drained(sdk.chat.completions.create({ ...chat, stream: true }, headers(id)).withResponse()),
    ],
    [
      "FIM completion",
      (sdk, id) =>
        sdk.completions
          .create({ model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 3 }, headers(id))
          .withResponse(),
    ],
    [
      "FIM completion, streamed",
      (sdk, id) =>
        drained(
          sdk.completions
            .create({ model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 3, stream: true }, headers(id))
            .withResponse(),
        ),
    ],
    [
      "Responses",
      (sdk, id) =>
        sdk.responses.create({ model: "chat-sim", input: "hi", max_output_tokens: 3 }, headers(id)).withResponse(),
    ],
    [
      "Responses, streamed",
      (sdk, id) =>
        drained(
          sdk.responses
            .create({ model: "chat-sim", input: "hi", max_output_tokens: 3, stream: true }, headers(id))
            .withResponse(),
        ),
    ],
    [
      "embeddings",
      (sdk, id) => sdk.embeddings.create({ model: "embed-sim", input: "alpha" }, headers(id)).withResponse(),
    ],
    ["models", (sdk, id) => sdk.models.list(headers(id)).withResponse()],
  ];

  for (const [what, send] of calls) {
    it(`carries a minted X-Request-Id on ${what}, and the backend got the same`, async () => {
      const { request_id, response } = await send(gw.openai());
      expect(response.status).toBe(200);
      expect(request_id).toMatch(MINTED);
      expect(response.headers.get("x-request-id")).toBe(request_id);
      if (what !== "models") expect(forwarded()).toBe(request_id);
    });

    it(`keeps the client's own X-Request-Id on ${what}, and replaces a malformed one`, async () => {
      const own = `editor.${what.replace(/\W+/g, "-")}:${Date.now()}`;
      const kept = await send(gw.openai(), own);
      expect(kept.request_id).toBe(own);
      if (what !== "models") expect(forwarded()).toBe(own);
      const replaced = await send(gw.openai(), "not an id");
      expect(replaced.request_id).toMatch(MINTED);
    });
  }

  it("refuses with OpenAI's type and code: a wrong key, an unknown model, a bad body", async () => {
    const wrongKey = await refusal(gw.openai({ apiKey: "sxt_not-a-real-key" }).chat.completions.create(chat));
    expect(wrongKey).toBeInstanceOf(OpenAI.AuthenticationError);
    expect([wrongKey.type, wrongKey.code]).toEqual(["invalid_request_error", "invalid_api_key"]);
    const unknown = await refusal(gw.openai().chat.completions.create({ ...chat, model: "no-such-model" }));
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect([unknown.type, unknown.code]).toEqual(["invalid_request_error", "model_not_found"]);
    const empty = await refusal(gw.openai().chat.completions.create({ ...chat, messages: [] }));
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
    expect([empty.type, empty.code, empty.param]).toEqual(["invalid_request_error", "empty_array", "messages"]);
    for (const err of [wrongKey, unknown, empty]) expect(err.requestID).toMatch(MINTED);
  });

  it("refuses a spent tokens limit with RateLimitError, rate_limit_exceeded and type tokens", async () => {
    const account = await gw.account("pro");
    const sdk = gw.openai({ apiKey: account.apiKey });
    let refused: InstanceType<typeof OpenAI.APIError> | undefined;
    for (let i = 0; i < 10 && !refused; i++) {
      await sdk.chat.completions.create({ ...chat, max_tokens: 16 }).catch((err: unknown) => {
        if (!(err instanceof OpenAI.APIError)) throw err;
        refused = err;
      });
      await sleep(100); // the charge is settled off the request's path
    }
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect([refused!.type, refused!.code]).toEqual(["tokens", "rate_limit_exceeded"]);
  });

  it("refuses a backend's failure with InternalServerError and server_error", async () => {
    await gw.sim.backend("east").configure({ fault: { type: "status", status: 500 } });
    try {
      const failed = await refusal(gw.openai().chat.completions.create(chat));
      expect(failed).toBeInstanceOf(OpenAI.InternalServerError);
      expect([failed.type, failed.code]).toEqual(["server_error", null]);
    } finally {
      await gw.sim.backend("east").configure({ fault: { type: "none" } });
    }
  });
});

const headers = (id?: string) => (id === undefined ? undefined : { headers: { "X-Request-Id": id } });

/** Reads a stream to its end, so that the next request finds the backend's record of this one. */
async function drained<T extends AsyncIterable<unknown>>(
  pending: Promise<{ data: T; request_id: string | null; response: Response }>,
): Promise<{ request_id: string | null; response: Response }> {
  const { data, request_id, response } = await pending;
  for await (const _ of data) void _;
  return { request_id, response };
}

async function refusal(request: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await request.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof OpenAI.APIError)) throw new Error(`expected an APIError, got ${String(err)}`);
  return err;
}
