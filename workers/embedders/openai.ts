import OpenAI, {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
  OpenAIError,
} from "openai";
import { z } from "zod";
import { batches, mapLimit } from "./batches.js";
import { EmbeddingError, type EmbedKind, type Embedder } from "./embedder.js";
import { indexDims, MAX_INDEX_DIMS, normalisedAndPadded } from "./vectors.js";

type Fetch = NonNullable<ConstructorParameters<typeof OpenAI>[0]>["fetch"];

export interface OpenAIEmbedderOptions {
  apiKey: string;
  /** Any server that speaks OpenAI's `POST /embeddings`: OpenAI, vLLM, Workers AI, … */
  baseURL?: string;
  model: string;
  /**
   * Dimensions to ask the model for (OpenAI's `dimensions`, for models trained to shorten their
   * vectors). Left out, the model's own size is used, learned from its first answer.
   */
  dimensions?: number;
  /** Inputs per request; default 256 (OpenAI accepts up to 2,048). */
  batchSize?: number;
  /** Characters per request, all inputs together; default 200,000, a quarter of OpenAI's token cap per request at worst-case code density. */
  maxBatchChars?: number;
  /** Requests in flight at once for one `embed` call; default 4 (a Worker may hold 6 connections). */
  concurrency?: number;
  /** The SDK's retries after a connection failure, 408, 409, 429 or 5xx; default 2. */
  maxRetries?: number;
  /** Per attempt, ms; default 15,000. */
  timeout?: number;
  /**
   * The whole `embed` call, ms, retries and all; default 50,000, under the Sextant client's own
   * 60-second timeout, so that the edge answers 504 before the client gives up and resends.
   */
  deadline?: number;
  /** A 429 asking for a longer wait is not retried here but surfaced, for the client to wait; default 10 s. */
  maxRetryAfterSeconds?: number;
  fetch?: Fetch;
}

/** The embeddings answer, checked: the SDK types it but does not validate it. */
const EmbeddingsAnswer = z.object({
  data: z.array(z.object({ index: z.number().int().nonnegative(), embedding: z.array(z.number()) })),
});

/** Sent when nothing else is, to learn the model's size: blank inputs are never sent (OpenAI refuses them). */
const PROBE = "dimensions";

/**
 * An embedder for any OpenAI-compatible embeddings endpoint, through the `openai` SDK (its retries
 * with backoff, its timeouts, its error classes). Texts are sent in batches, a few at a time;
 * every vector is checked, L2-normalised and zero-padded to a power of two (see `vectors.ts`), and
 * every failure becomes an `EmbeddingError` whose message holds neither texts nor key.
 *
 * @example
 * const embedder = new OpenAIEmbedder({ apiKey, model: "text-embedding-3-small" });
 * const [vector] = await embedder.embed(["export function revokeKey() {}"], "document");
 * embedder.dims; // 2048: 1536 padded
 */
export class OpenAIEmbedder implements Embedder {
  readonly model: string;
  readonly #client: OpenAI;
  readonly #dimensions: number | undefined;
  readonly #batchSize: number;
  readonly #maxBatchChars: number;
  readonly #concurrency: number;
  readonly #deadline: number;
  readonly #timeout: number;
  /** The length the service returns, fixed by `dimensions` or by its first answer. */
  #native: number | undefined;

  constructor(options: OpenAIEmbedderOptions) {
    this.model = options.model;
    this.#dimensions = options.dimensions;
    this.#batchSize = positive("batchSize", options.batchSize ?? 256);
    this.#maxBatchChars = positive("maxBatchChars", options.maxBatchChars ?? 200_000);
    this.#concurrency = positive("concurrency", options.concurrency ?? 4);
    this.#deadline = positive("deadline", options.deadline ?? 50_000);
    this.#timeout = positive("timeout", options.timeout ?? 15_000);
    if (options.dimensions !== undefined) this.#native = checkedSize(positive("dimensions", options.dimensions));
    const fetch: Fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#client = new OpenAI({
      apiKey: options.apiKey,
      baseURL: options.baseURL ?? "https://api.openai.com/v1",
      maxRetries: options.maxRetries ?? 2,
      timeout: this.#timeout,
      fetch: boundedRetryAfter(fetch, options.maxRetryAfterSeconds ?? 10),
      // Request details at debug level would include the texts: nothing of a call reaches logs.
      logLevel: "off",
    });
  }

  get dims(): number {
    if (this.#native === undefined) {
      throw new Error(`The dimensions of ${this.model} are known once it has answered; read them after embed().`);
    }
    return indexDims(this.#native);
  }

  async embed(texts: string[], _kind: EmbedKind): Promise<Float32Array[]> {
    const signal = AbortSignal.timeout(this.#deadline);
    const sent = texts.flatMap((text, i) => (text.trim() === "" ? [] : [i]));
    if (sent.length === 0 && this.#native === undefined) await this.#request([PROBE], signal);
    const parts = batches(
      sent.map((i) => texts[i]!),
      this.#batchSize,
      this.#maxBatchChars,
    );
    const answers = await mapLimit(parts, this.#concurrency, (part) => this.#request(part.texts, signal));
    // Blank texts have no meaning to embed: a zero vector, which matches nothing.
    const vectors: Float32Array[] = texts.map(() => new Float32Array(this.dims));
    parts.forEach((part, b) => answers[b]!.forEach((vector, j) => (vectors[sent[part.start + j]!] = vector)));
    return vectors;
  }

  async #request(input: string[], signal: AbortSignal): Promise<Float32Array[]> {
    let answer: unknown;
    try {
      answer = await this.#client.embeddings.create(
        {
          model: this.model,
          input,
          encoding_format: "float",
          ...(this.#dimensions !== undefined ? { dimensions: this.#dimensions } : {}),
        },
        { signal },
      );
    } catch (err) {
      throw this.#failure(err, signal);
    }
    const parsed = EmbeddingsAnswer.safeParse(answer);
    if (!parsed.success) throw invalid("its answer is not an embeddings list");
    const data = parsed.data.data;
    if (data.length !== input.length) {
      throw invalid(`it returned ${data.length} vectors for ${input.length} inputs`);
    }
    const ordered = new Array<number[]>(input.length);
    for (const { index, embedding } of data) {
      if (index >= input.length || ordered[index]) throw invalid("its answer's indexes do not match the inputs");
      ordered[index] = embedding;
    }
    const length = ordered[0]!.length;
    if (ordered.some((e) => e.length !== length)) throw invalid("its vectors are not all the same length");
    if (this.#native === undefined) this.#native = checkedSize(length);
    if (length !== this.#native) {
      throw invalid(
        this.#dimensions !== undefined
          ? `it returned ${length}-dimensional vectors, not the ${this.#dimensions} asked for`
          : `it returned ${length}-dimensional vectors, earlier ${this.#native}`,
      );
    }
    const dims = indexDims(length);
    return ordered.map((embedding) => {
      const vector = normalisedAndPadded(embedding, dims);
      if (!vector) throw invalid("a vector holds a value that is not a finite number");
      return vector;
    });
  }

  /** The SDK's errors, in the terms the routes answer with. Anything else is a bug and is rethrown. */
  #failure(err: unknown, signal: AbortSignal): unknown {
    const attempts = `${this.#client.maxRetries + 1} attempt${this.#client.maxRetries ? "s" : ""}`;
    if (err instanceof APIUserAbortError && signal.aborted) {
      return new EmbeddingError("timeout", `The embedding service did not finish within ${this.#deadline} ms.`, {
        cause: err,
      });
    }
    if (err instanceof APIConnectionTimeoutError) {
      return new EmbeddingError(
        "timeout",
        `The embedding service did not answer within ${this.#timeout} ms (${attempts}).`,
        { cause: err },
      );
    }
    if (err instanceof APIConnectionError) {
      return new EmbeddingError("unavailable", `Could not reach the embedding service (${attempts}).`, { cause: err });
    }
    if (err instanceof APIError && typeof err.status === "number") {
      const status = err.status;
      if (status === 429) {
        const wait = retryAfterSeconds(err.headers);
        return new EmbeddingError("rate_limited", `The embedding service is rate limiting the edge (HTTP 429).`, {
          status,
          ...(wait !== undefined ? { retryAfterSeconds: wait } : {}),
          cause: err,
        });
      }
      if (status === 408) {
        return new EmbeddingError("timeout", `The embedding service timed out (HTTP 408, ${attempts}).`, { status });
      }
      if (status >= 500) {
        return new EmbeddingError("unavailable", `The embedding service failed (HTTP ${status}, ${attempts}).`, {
          status,
          cause: err,
        });
      }
      // Its message can quote the key (OpenAI's does, masked): not repeated.
      if (status === 401 || status === 403) {
        return new EmbeddingError("rejected", `The embedding service refused the edge's API key (HTTP ${status}).`, {
          status,
        });
      }
      const said = upstreamMessage(err);
      return new EmbeddingError(
        "rejected",
        `The embedding service refused the request for model ${this.model} (HTTP ${status})${said ? `: ${said}` : "."}`,
        { status, cause: err },
      );
    }
    if (err instanceof OpenAIError) {
      return new EmbeddingError("invalid_response", `The embedding service's answer could not be read.`, {
        cause: err,
      });
    }
    return err;
  }
}

function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer.`);
  return value;
}

/** A model size the index can hold once padded. */
function checkedSize(native: number): number {
  if (native < 1 || indexDims(native) > MAX_INDEX_DIMS) {
    throw new EmbeddingError(
      "misconfigured",
      `The embedding model makes ${native}-dimensional vectors; the index holds at most ${MAX_INDEX_DIMS}. Ask for fewer with EMBEDDING_DIMENSIONS if the model supports it.`,
    );
  }
  return native;
}

function invalid(what: string): EmbeddingError {
  return new EmbeddingError("invalid_response", `The embedding service's answer is unusable: ${what}.`);
}

/** The service's own error message, short: it explains an unknown model or a refused input. */
function upstreamMessage(err: APIError): string | undefined {
  const message = (err.error as { message?: unknown } | undefined)?.message;
  if (typeof message !== "string" || message === "") return undefined;
  return message.length > 200 ? `${message.slice(0, 200)}…` : message;
}

/** `Retry-After` (seconds or an HTTP date) or the SDK's `retry-after-ms`, in seconds. */
export function retryAfterSeconds(headers: Headers | undefined): number | undefined {
  const ms = Number.parseFloat(headers?.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return ms / 1000;
  const value = headers?.get("retry-after");
  if (!value) return undefined;
  const seconds = Number.parseFloat(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

/**
 * The SDK sleeps for as long as a 429's `Retry-After` says before retrying, however long that is; a
 * Worker request should not. A longer wait is marked not retryable (`x-should-retry: false`, which
 * the SDK obeys), so it surfaces at once and the edge's client, told to retry later, waits instead.
 */
function boundedRetryAfter(fetch: Fetch, maxSeconds: number): Fetch {
  return async (input, init) => {
    const response = await fetch!(input, init);
    if (response.status !== 429) return response;
    const wait = retryAfterSeconds(response.headers);
    if (wait === undefined || wait <= maxSeconds) return response;
    const headers = new Headers(response.headers);
    headers.set("x-should-retry", "false");
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  };
}
