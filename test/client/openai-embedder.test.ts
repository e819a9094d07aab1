import { createServer } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { EmbeddingError } from "../../workers/embedders/embedder.js";
import { OpenAIEmbedder, type OpenAIEmbedderOptions } from "../../workers/embedders/openai.js";
import { startOpenAIStandIn, standInVector, type OpenAIStandIn } from "../support/openai-standin.js";

let standIn: OpenAIStandIn;

beforeAll(async () => {
  standIn = await startOpenAIStandIn({
    models: {
      "text-embedding-3-small": { dims: 1536, shortenable: true },
      "standin-embed-768": { dims: 768, scale: 7.5 },
      "standin-embed-5000": { dims: 5000 },
    },
    maxInputs: 64,
  });
});
afterAll(async () => {
  await standIn?.close();
});
beforeEach(() => standIn.reset());

function embedder(options: Partial<OpenAIEmbedderOptions> = {}): OpenAIEmbedder {
  return new OpenAIEmbedder({
    apiKey: standIn.apiKey,
    baseURL: standIn.url,
    model: "text-embedding-3-small",
    maxRetries: 0,
    ...options,
  });
}

/** The requests the stand-in receives from here on. */
function recorder() {
  const start = standIn.requests.length;
  return () => standIn.requests.slice(start);
}

async function failure(promise: Promise<unknown>): Promise<EmbeddingError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EmbeddingError);
  return err as EmbeddingError;
}

const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};
const norm = (a: ArrayLike<number>) => Math.sqrt(dot(a, a));

const texts = (n: number, chars = 20) =>
  Array.from({ length: n }, (_, i) => `function handler${i}() { return ${i}; }`.padEnd(chars, " x"));

describe("OpenAIEmbedder against an OpenAI-compatible stand-in", () => {
  it("sends the model, the key and float encoding, and returns one vector per text in order", async () => {
    const requests = recorder();
    const e = embedder();
    const input = ["revoke an api key", "render a markdown table"];
    const vectors = await e.embed(input, "document");
    expect(vectors).toHaveLength(2);
    const [request] = requests();
    expect(request).toMatchObject({ status: 200, inputs: input });
    expect(request!.headers.authorization).toBe(`Bearer ${standIn.apiKey}`);
    expect(request!.body).toEqual({ model: "text-embedding-3-small", input, encoding_format: "float" });
    input.forEach((text, i) => {
      const expected = standInVector(text, 1536);
      expect(dot(vectors[i]!.subarray(0, 1536), expected)).toBeCloseTo(1, 5);
    });
  });

  it("splits texts into batches of at most batchSize inputs", async () => {
    const requests = recorder();
    const vectors = await embedder({ batchSize: 4 }).embed(texts(10), "document");
    expect(vectors).toHaveLength(10);
    expect(requests().map((r) => r.inputs.length)).toEqual([4, 4, 2]);
    expect(requests().flatMap((r) => r.inputs)).toEqual(texts(10));
  });

  it("also splits by characters, and sends a text longer than the budget alone", async () => {
    const requests = recorder();
    const input = [...texts(4, 100), "y".repeat(400), ...texts(2, 100)];
    await embedder({ maxBatchChars: 250 }).embed(input, "document");
    expect(requests().map((r) => r.inputs.length)).toEqual([2, 2, 1, 2]);
    for (const r of requests()) expect(r.inputs.join("").length <= 250 || r.inputs.length === 1).toBe(true);
  });

  it("keeps at most `concurrency` requests in flight and keeps results in order", async () => {
    standIn.stallNext(8, 50);
    const input = texts(8);
    const vectors = await embedder({ batchSize: 1, concurrency: 2 }).embed(input, "document");
    expect(standIn.maxInFlight).toBe(2);
    input.forEach((text, i) => expect(dot(vectors[i]!.subarray(0, 1536), standInVector(text, 1536))).toBeCloseTo(1, 5));
  });

  it("a batch size above the service's limit surfaces its refusal", async () => {
    const err = await failure(embedder({ batchSize: 100 }).embed(texts(65), "document"));
    expect(err.failure).toBe("rejected");
    expect(err.status).toBe(400);
    expect(err.message).toContain("at most 64 inputs");
  });

  describe("normalisation and padding", () => {
    it("pads 1536 dimensions to 2048 with zeros, unit length", async () => {
      const e = embedder();
      const [v] = await e.embed(["merkle tree diff"], "document");
      expect(e.dims).toBe(2048);
      expect(v).toHaveLength(2048);
      expect(norm(v!)).toBeCloseTo(1, 5);
      expect(v!.subarray(1536).every((x) => x === 0)).toBe(true);
    });

    it("normalises a model's vectors that are not unit length, and pads 768 to 1024", async () => {
      const e = embedder({ model: "standin-embed-768" });
      const [a, b] = await e.embed(["parse the config file", "validate config settings"], "document");
      expect(e.dims).toBe(1024);
      expect(norm(standInVector("parse the config file", 768, 768, 7.5))).toBeCloseTo(7.5, 5);
      expect(norm(a!)).toBeCloseTo(1, 5);
      expect(a!.subarray(768).every((x) => x === 0)).toBe(true);
      // Padding preserves inner products: the cosine of the model's own vectors.
      const rawA = standInVector("parse the config file", 768);
      const rawB = standInVector("validate config settings", 768);
      expect(dot(a!, b!)).toBeCloseTo(dot(rawA, rawB), 5);
      expect(dot(a!, b!)).toBeGreaterThan(0.1);
    });

    it("embeds blank texts as zero vectors without sending them", async () => {
      const requests = recorder();
      const e = embedder();
      const vectors = await e.embed(["", "   ", "sync the tree"], "document");
      expect(requests().flatMap((r) => r.inputs)).toEqual(["sync the tree"]);
      expect(norm(vectors[0]!)).toBe(0);
      expect(norm(vectors[1]!)).toBe(0);
      expect(vectors[0]).toHaveLength(2048);
      expect(norm(vectors[2]!)).toBeCloseTo(1, 5);
    });

    it("learns a model's size from a probe when every text is blank", async () => {
      const requests = recorder();
      const e = embedder({ model: "standin-embed-768" });
      const vectors = await e.embed([" "], "document");
      expect(requests()).toHaveLength(1);
      expect(vectors[0]).toHaveLength(1024);
      expect(e.dims).toBe(1024);
    });
  });

  describe("dimensions", () => {
    it("asks for `dimensions` and pads them: 256 stays, 300 becomes 512", async () => {
      const requests = recorder();
      const exact = embedder({ dimensions: 256 });
      expect(exact.dims).toBe(256);
      const [v] = await exact.embed(["search the index"], "query");
      expect(v).toHaveLength(256);
      expect(requests()[0]!.body).toMatchObject({ dimensions: 256 });
      const padded = embedder({ dimensions: 300 });
      expect(padded.dims).toBe(512);
      expect((await padded.embed(["search the index"], "query"))[0]).toHaveLength(512);
    });

    it("are unknown until the model's first answer when not asked for", async () => {
      const e = embedder({ model: "standin-embed-768" });
      expect(() => e.dims).toThrow(/known once it has answered/);
      await e.embed(["x y"], "query");
      expect(e.dims).toBe(1024);
    });

    it("refuses a model larger than the index holds, or dimensions larger than it", async () => {
      const err = await failure(embedder({ model: "standin-embed-5000" }).embed(["a b"], "document"));
      expect(err.failure).toBe("misconfigured");
      expect(err.message).toContain("5000-dimensional");
      expect(() => embedder({ dimensions: 5000 })).toThrow(EmbeddingError);
    });

    it("surfaces the service's refusal of dimensions for a model that cannot shorten its vectors", async () => {
      const err = await failure(embedder({ model: "standin-embed-768", dimensions: 256 }).embed(["a b"], "query"));
      expect(err).toMatchObject({ failure: "rejected", status: 400 });
      expect(err.message).toContain("does not support specifying dimensions");
    });

    it.each([
      ["missing-vector", /2 vectors for 3 inputs|vectors for/],
      ["ragged", /not all the same length/],
      ["not-a-number", /not an embeddings list/],
    ] as const)("rejects an answer with a %s", async (mode, message) => {
      standIn.corruptNext(1, mode);
      const err = await failure(embedder().embed(["one", "two", "three"], "document"));
      expect(err.failure).toBe("invalid_response");
      expect(err.message).toMatch(message);
    });

    it("rejects vectors whose length changes between answers", async () => {
      let calls = 0;
      const e = embedder({
        model: "standin-embed-768",
        // The model behind the same URL is swapped between two calls.
        fetch: (url, init) =>
          fetch(
            url,
            calls++ === 0
              ? init
              : { ...init, body: String(init!.body).replace("standin-embed-768", "text-embedding-3-small") },
          ),
      });
      await e.embed(["first answer"], "document");
      const err = await failure(e.embed(["second answer"], "document"));
      expect(err.failure).toBe("invalid_response");
      expect(err.message).toContain("1536-dimensional vectors, earlier 768");
    });
  });

  describe("failures", () => {
    it("retries a 500 with the SDK's backoff, then succeeds", async () => {
      const requests = recorder();
      standIn.failNext(1, 500);
      const vectors = await embedder({ maxRetries: 2 }).embed(["retry me"], "document");
      expect(vectors).toHaveLength(1);
      expect(requests().map((r) => r.status)).toEqual([500, 200]);
    });

    it("surfaces 5xx as unavailable once retries are spent", async () => {
      const requests = recorder();
      standIn.failNext(Infinity, 503);
      const err = await failure(embedder({ maxRetries: 1 }).embed(["down"], "document"));
      expect(err).toMatchObject({ failure: "unavailable", status: 503 });
      expect(err.message).toContain("2 attempts");
      expect(requests()).toHaveLength(2);
    });

    it("surfaces 429 as rate_limited with the service's Retry-After", async () => {
      const requests = recorder();
      standIn.failNext(Infinity, 429, { retryAfterMs: "20" });
      const err = await failure(embedder({ maxRetries: 1 }).embed(["busy"], "document"));
      expect(err).toMatchObject({ failure: "rate_limited", status: 429, retryAfterSeconds: 0.02 });
      expect(requests()).toHaveLength(2);
    });

    it("does not sit out a long Retry-After: it surfaces at once for the caller to wait", async () => {
      const requests = recorder();
      standIn.failNext(Infinity, 429, { retryAfter: "120" });
      const started = Date.now();
      const err = await failure(embedder({ maxRetries: 2 }).embed(["busy"], "document"));
      expect(err).toMatchObject({ failure: "rate_limited", retryAfterSeconds: 120 });
      expect(requests()).toHaveLength(1);
      // Far from the 120 s it was told to wait, however busy the machine.
      expect(Date.now() - started).toBeLessThan(60_000);
    });

    it("surfaces a service that does not answer in time as a timeout", async () => {
      standIn.stallNext(2, 1_000);
      const err = await failure(embedder({ timeout: 150 }).embed(["slow"], "document"));
      expect(err.failure).toBe("timeout");
      expect(err.message).toContain("150 ms");
    });

    it("bounds the whole call, retries included, by its deadline", async () => {
      standIn.stallNext(5, 1_000);
      const started = Date.now();
      const err = await failure(embedder({ timeout: 10_000, maxRetries: 3, deadline: 300 }).embed(["slow"], "query"));
      expect(err.failure).toBe("timeout");
      expect(err.message).toContain("300 ms");
      expect(Date.now() - started).toBeLessThan(2_000);
    });

    it("surfaces a wrong key without repeating what the service said about it", async () => {
      const key = "sk-wrong-key-abcdefghijklmnop";
      const err = await failure(embedder({ apiKey: key }).embed(["hello"], "document"));
      expect(err).toMatchObject({ failure: "rejected", status: 401 });
      expect(err.message).toContain("refused the edge's API key");
      expect(err.message).not.toContain(key.slice(-4));
      expect(err.message).not.toContain("hello");
    });

    it("surfaces an unknown model with the service's explanation", async () => {
      const err = await failure(embedder({ model: "no-such-model" }).embed(["hello"], "document"));
      expect(err).toMatchObject({ failure: "rejected", status: 404 });
      expect(err.message).toContain("does not exist");
    });

    it("surfaces an unreachable service as unavailable", async () => {
      const port = await new Promise<number>((resolve) => {
        const server = createServer().listen(0, "127.0.0.1", () => {
          const { port } = server.address() as { port: number };
          server.close(() => resolve(port));
        });
      });
      const err = await failure(embedder({ baseURL: `http://127.0.0.1:${port}/v1` }).embed(["x"], "document"));
      expect(err.failure).toBe("unavailable");
      expect(err.message).toContain("Could not reach");
    });

    it("stops sending batches after one fails", async () => {
      const requests = recorder();
      standIn.failNext(1, 400);
      await failure(embedder({ batchSize: 1, concurrency: 1 }).embed(texts(5), "document"));
      expect(requests()).toHaveLength(1);
    });
  });
});
