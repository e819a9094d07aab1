/**
 * What the edge needs from an embedder: text in, one vector per text out, all of the same power-of-
 * two length. The keyed rotation (`protocol/vector-key.ts`) and the Workspace object both require
 * a power of two, and the object fixes a workspace's dimensions at its first commit, so `dims` is
 * what identifies an index's vector space to the rest of the edge.
 */
export interface Embedder {
  /** The model's name, for logs and error details. */
  readonly model: string;
  /**
   * The length of every vector `embed` returns: a power of two from 8 to 4096, what the index
   * stores. An embedder that learns its model's size from the service knows it once `embed` has
   * resolved, which is when the routes read it.
   */
  readonly dims: number;
  /**
   * One unit-length (or zero) vector per text, in order. `kind` lets an embedder treat questions
   * and code differently; the OpenAI embeddings protocol has no such field, so both are sent alike.
   */
  embed(texts: string[], kind: EmbedKind): Promise<Float32Array[]>;
  /**
   * How much each term of a question says to this model (`questionTermWeights`), for the lexical
   * and translation channels; absent where the model has no such notion, and every term counts 1.
   */
  questionTermWeight?(): (term: string) => number;
  /**
   * Parts of a chunk of code to embed beside it (`definitionPieces`: one per definition, at most
   * `MAX_DEFINITION_PIECES`), each ranked as its chunk: a chunk scores the best of its own vector and
   * its pieces'. Absent where the embedder indexes one vector per chunk.
   */
  documentPieces?(text: string): string[];
}

export type EmbedKind = "document" | "query";

/**
 * Why an embedding call failed, in terms the routes map to problem codes: `timeout` (no answer in
 * time), `rate_limited` (the service's own quota, after its retries), `unavailable` (5xx or no
 * connection), `rejected` (a 4xx: wrong key, unknown model, a request it refuses),
 * `invalid_response` (an answer that breaks the protocol) and `misconfigured` (settings that
 * cannot work, found when the service answers).
 */
export type EmbeddingFailure =
  | "timeout"
  | "rate_limited"
  | "unavailable"
  | "rejected"
  | "invalid_response"
  | "misconfigured";

export interface EmbeddingErrorOptions {
  /** The service's HTTP status, when it answered. */
  status?: number;
  /** Seconds the service asked us to wait (`Retry-After`), when it said. */
  retryAfterSeconds?: number;
  cause?: unknown;
}

/**
 * Every failure of an embedder that talks to a service. Messages never contain the texts or the
 * API key, so they can be logged and shown: a failed commit or search says why without leaking.
 */
export class EmbeddingError extends Error {
  override readonly name = "EmbeddingError";
  readonly status: number | undefined;
  readonly retryAfterSeconds: number | undefined;

  constructor(
    readonly failure: EmbeddingFailure,
    message: string,
    options: EmbeddingErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}
