import {
  APIConnectionTimeoutError,
  APIError,
  NotFoundError,
  Turbopuffer,
  type AttributeSchema,
  type Filter,
  type Namespace,
} from "@turbopuffer/turbopuffer";
import { z } from "zod";
import { MAX_DEFINITION_PIECES } from "../protocol/embedder/names.js";
import type { TranslatedTerm } from "./hot-index.js";
import type { BackendEntry, BackendFilter, BackendHit, IndexBackend } from "./index-backend.js";
import { bestPerId } from "./top-k.js";
import { termTokens, translationBm25, weightedBm25, type TermsRanking } from "./turbopuffer-ranking.js";

/**
 * Turbopuffer answers at most this many rows per query unless the account's limit was raised;
 * asking for more is a 400, so larger `k` is clamped rather than failing the search.
 */
const MAX_TOP_K = 1200;

/**
 * Rows per write request. A 512-dimension row is about 10 KB of JSON, so a batch stays near
 * 10 MB: far under Turbopuffer's 256 MB request limit, and small enough that building the body
 * does not strain a Durable Object's 128 MB of memory.
 */
const ROWS_PER_REQUEST = 1000;
/** Entries whose pieces one write request carries: at most `ROWS_PER_REQUEST` rows and as many deletes. */
const PIECED_ENTRIES_PER_REQUEST = Math.floor(ROWS_PER_REQUEST / MAX_DEFINITION_PIECES);

/**
 * Cosine distance is the only metric the API offers that ranks by angle; the vectors are unit
 * length (L2-normalised, then rotated orthogonally), so 1 - distance is exactly their inner product.
 */
const DISTANCE_METRIC = "cosine_distance" as const;

export interface TurbopufferBackendOptions {
  apiKey: string;
  /** Default `https://{region}.turbopuffer.com`; a URL with a `{region}` placeholder takes `region`. */
  baseURL?: string;
  region?: string;
  /** One per workspace, e.g. `sextant-<workspace object id>`; `[A-Za-z0-9-_.]{1,128}`. */
  namespace: string;
  dims: number;
  /** Any fetch-compatible function; the global one by default. */
  fetch?: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
  /**
   * Retries of connection failures, 408, 409, 429 and 5xx, with the client's backoff, for every
   * call. Default: the client's own, 4, and 6 for writes.
   */
  maxRetries?: number;
  /** Per attempt, ms. Default 60,000. */
  timeout?: number;
}

const Options = z.object({
  apiKey: z.string().min(1),
  baseURL: z.url().optional(),
  region: z.string().min(1).optional(),
  // 128 characters at most with the pieces' namespace's suffix.
  namespace: z.string().regex(/^[A-Za-z0-9\-_.]{1,121}$/, "must match [A-Za-z0-9-_.]{1,121}"),
  dims: z.number().int().min(1).max(10_752),
  maxRetries: z.number().int().min(0).optional(),
  timeout: z.number().int().positive().optional(),
});

/** What a query returns, checked before use: ids and the ranking's `$dist`, nothing else is read. */
const QueryRows = z.object({
  rows: z.array(z.object({ id: z.string(), $dist: z.number() })).default([]),
});

/**
 * A Turbopuffer request that failed, after the client's retries. `status` is the HTTP status
 * (undefined when the service was not reached); `timedOut` tells a slow service from a broken one.
 */
export class TurbopufferBackendError extends Error {
  override readonly name = "TurbopufferBackendError";
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly timedOut: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The name of the namespace beside a backend's that holds its entries' definition pieces: `<namespace>.pieces`. */
export const PIECES_NAMESPACE_SUFFIX = ".pieces";

/**
 * An index backend on a Turbopuffer namespace: one row per entry with its vector, the encrypted
 * path and language (filterable), and its keyed terms for BM25. An entry's definition pieces are
 * rows of a namespace of their own (`<namespace>.pieces`, ids `<entry id>.<piece>`, vector, path
 * and language), so that they never count in the entries' BM25 statistics. Nothing else is sent:
 * no text, no plaintext path, no key. Plain TypeScript with no runtime-specific import, so it runs in the
 * Workspace Durable Object and in Node alike; in workerd the client resolves to its global-`fetch`
 * build (its Node build, on undici, is chosen only under the `node` export condition).
 *
 * @example
 * const backend = new TurbopufferBackend({
 *   apiKey: env.TURBOPUFFER_API_KEY,
 *   region: "gcp-us-central1",
 *   namespace: `sextant-${ctx.id.toString()}`,
 *   dims: 512,
 * });
 * await backend.write(entries);
 * const hits = await backend.queryVector(query, 10, { pathPrefix });
 */
export class TurbopufferBackend implements IndexBackend {
  readonly namespace: string;
  readonly dims: number;
  readonly #ns: Namespace;
  readonly #piecesNs: Namespace;
  readonly #piecesName: string;
  readonly #schema: Record<string, AttributeSchema>;
  readonly #piecesSchema: Record<string, AttributeSchema>;
  /**
   * Whether the pieces' namespace exists, so that an index without pieces (a remote embedder's) is
   * not asked for them at every search: unknown until a query, a write or a removal tells. Every
   * write to the workspace's index goes through this object, so once known it stays true.
   */
  #piecesExist: boolean | undefined;
  /** Per-call options: the client's `write` sets its own retry count, which an explicit one overrides. */
  readonly #requestOptions: { maxRetries?: number };

  constructor(options: TurbopufferBackendOptions) {
    const parsed = Options.safeParse(options);
    if (!parsed.success) throw new TypeError(`Invalid Turbopuffer backend options: ${z.prettifyError(parsed.error)}`);
    const { apiKey, baseURL, region, namespace, dims, maxRetries, timeout } = parsed.data;
    if (!baseURL && !region) throw new TypeError("Invalid Turbopuffer backend options: give a region or a baseURL");
    this.namespace = namespace;
    this.dims = dims;
    // Every option is passed explicitly (null for "none") so that nothing is read from
    // TURBOPUFFER_* environment variables of whatever process this runs in.
    const client = new Turbopuffer({
      apiKey,
      baseURL: baseURL ?? null,
      region: baseURL && !baseURL.includes("{region}") ? null : (region ?? null),
      ...(options.fetch && { fetch: options.fetch }),
      ...(maxRetries !== undefined && { maxRetries }),
      ...(timeout !== undefined && { timeout }),
      // Gzip request bodies: dense f32 vectors as JSON numbers (about 10.7 KB a row at 512
      // dimensions) shrink to under half.
      compression: true,
    });
    this.#ns = client.namespace(namespace);
    this.#piecesName = `${namespace}${PIECES_NAMESPACE_SUFFIX}`;
    this.#piecesNs = client.namespace(this.#piecesName);
    this.#requestOptions = maxRetries === undefined ? {} : { maxRetries };
    this.#schema = {
      vector: { type: `[${dims}]f32`, ann: true },
      path: { type: "string", filterable: true },
      language: { type: "string", filterable: true },
      // Each array element is one token, taken as is: no splitting, stemming or stop words, so a
      // keyed term id can never be cut or dropped, which a word tokenizer over a string would
      // only promise by its current rules.
      terms: { type: "[]string", full_text_search: { tokenizer: "pre_tokenized_array" }, filterable: false },
    };
    const { terms: _, ...piecesSchema } = this.#schema;
    this.#piecesSchema = piecesSchema;
  }

  async write(entries: readonly BackendEntry[]): Promise<void> {
    for (const entry of entries) {
      if ([entry.vector, ...(entry.pieces ?? [])].some((v) => v.length !== this.dims)) {
        throw new TypeError(`Entry ${entry.id} has a vector of other dimensions than the namespace's ${this.dims}`);
      }
      if ((entry.pieces?.length ?? 0) > MAX_DEFINITION_PIECES) {
        throw new TypeError(`Entry ${entry.id} has more than ${MAX_DEFINITION_PIECES} pieces`);
      }
    }
    // Pieces first, so an entry is never searchable without the pieces it ranks by; an entry written
    // again with fewer pieces loses the rest in the same request.
    for (let start = 0; start < entries.length; start += PIECED_ENTRIES_PER_REQUEST) {
      const batch = entries.slice(start, start + PIECED_ENTRIES_PER_REQUEST);
      const rows = batch.flatMap((e) =>
        (e.pieces ?? []).map((vector, p) => ({ id: pieceId(e.id, p), vector, path: e.path, language: e.language })),
      );
      if (rows.length === 0 && this.#piecesExist === false) continue;
      const deletes = batch.flatMap((e) =>
        Array.from({ length: MAX_DEFINITION_PIECES - (e.pieces?.length ?? 0) }, (_, i) =>
          pieceId(e.id, (e.pieces?.length ?? 0) + i),
        ),
      );
      const upsert =
        rows.length === 0
          ? {}
          : {
              upsert_columns: {
                id: rows.map((r) => r.id),
                vector: rows.map((r) => Array.from(r.vector)),
                path: rows.map((r) => r.path),
                language: rows.map((r) => r.language),
              },
              distance_metric: DISTANCE_METRIC,
              schema: this.#piecesSchema,
            };
      const done = await this.#call(
        "write",
        () => this.#piecesNs.write({ ...upsert, deletes }, this.#requestOptions),
        // Deletes alone, in a namespace never written: nothing to forget.
        { notFound: null },
        this.#piecesName,
      );
      this.#piecesExist = done !== null;
    }
    for (let start = 0; start < entries.length; start += ROWS_PER_REQUEST) {
      const batch = entries.slice(start, start + ROWS_PER_REQUEST);
      await this.#call("write", () =>
        this.#ns.write(
          {
            upsert_columns: {
              id: batch.map((e) => e.id),
              vector: batch.map((e) => Array.from(e.vector)),
              path: batch.map((e) => e.path),
              language: batch.map((e) => e.language),
              terms: batch.map((e) => termTokens(e.terms)),
            },
            distance_metric: DISTANCE_METRIC,
            schema: this.#schema,
          },
          this.#requestOptions,
        ),
      );
    }
  }

  async remove(ids: readonly string[]): Promise<void> {
    for (let start = 0; start < ids.length; start += ROWS_PER_REQUEST) {
      const deletes = ids.slice(start, start + ROWS_PER_REQUEST);
      // A namespace that was never written holds none of the ids: nothing to forget.
      await this.#call("remove", () => this.#ns.write({ deletes }, this.#requestOptions), { notFound: undefined });
    }
    if (this.#piecesExist === false) return;
    // Every piece an entry may have: deleting a row that is not there changes nothing.
    const pieces = ids.flatMap((id) => Array.from({ length: MAX_DEFINITION_PIECES }, (_, p) => pieceId(id, p)));
    for (let start = 0; start < pieces.length; start += ROWS_PER_REQUEST) {
      const deletes = pieces.slice(start, start + ROWS_PER_REQUEST);
      const done = await this.#call(
        "remove",
        () => this.#piecesNs.write({ deletes }, this.#requestOptions),
        { notFound: null },
        this.#piecesName,
      );
      if (done === null) {
        this.#piecesExist = false;
        return;
      }
    }
  }

  async queryVector(vector: Float32Array, k: number, filter: BackendFilter): Promise<BackendHit[]> {
    if (vector.length !== this.dims) {
      throw new TypeError(`Query vector has ${vector.length} dimensions; the namespace has ${this.dims}`);
    }
    // An entry scores the best of its own vector and its pieces' (as `HotIndex.queryVector` merges them).
    const rankBy: ["vector", "ANN", number[]] = ["vector", "ANN", Array.from(vector)];
    const [rows, pieceRows] = await Promise.all([
      this.#query("queryVector", k, filter, rankBy),
      this.#piecesExist === false
        ? null
        : this.#query("queryVector", k * MAX_DEFINITION_PIECES, filter, rankBy, this.#piecesNs),
    ]);
    if (pieceRows === null) this.#piecesExist = false;
    // A piece's row id is its entry's id and its place (`pieceId`).
    const hits = [
      ...rows.map((row) => ({ id: row.id, score: 1 - row.$dist })),
      ...(pieceRows ?? []).map((row) => ({ id: row.id.slice(0, row.id.lastIndexOf(".")), score: 1 - row.$dist })),
    ];
    return bestPerId(hits, k);
  }

  /**
   * BM25 over the keyed term tokens. With `weights`, each term's part is multiplied by its weight as
   * `HotIndex.queryTerms` multiplies it: the terms of one weight are one BM25 clause, and the
   * clauses are added (`["Sum", [["Product", w, ["terms", "BM25", tokens]], …]]`); a term given
   * twice counts once, at its first weight, and a term of weight 0 not at all.
   */
  async queryTerms(
    terms: readonly number[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]> {
    const rankBy = weightedBm25(terms, weights);
    if (!rankBy) return [];
    const rows = await this.#query("queryTerms", k, filter, rankBy);
    return rows.map((row) => ({ id: row.id, score: row.$dist }));
  }

  /**
   * The translation channel as Turbopuffer can rank it: BM25 over each question word and its
   * heaviest translations, weighted (`translationBm25`), in place of the hot index's translation
   * language model, which Turbopuffer's rankings cannot express.
   */
  async queryTranslated(
    words: readonly TranslatedTerm[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]> {
    const asked = translationBm25(words, weights);
    return this.queryTerms(asked.terms, k, filter, asked.weights);
  }

  async destroy(): Promise<void> {
    await this.#call(
      "destroy",
      () => this.#piecesNs.deleteAll({}, this.#requestOptions),
      { notFound: undefined },
      this.#piecesName,
    );
    this.#piecesExist = false;
    await this.#call("destroy", () => this.#ns.deleteAll({}, this.#requestOptions), { notFound: undefined });
  }

  /** The rows a query ranks first; with `ns`, the pieces' namespace's, or null when it does not exist. */
  async #query(
    operation: string,
    k: number,
    filter: BackendFilter,
    rankBy: ["vector", "ANN", number[]] | TermsRanking,
  ): Promise<Array<{ id: string; $dist: number }>>;
  async #query(
    operation: string,
    k: number,
    filter: BackendFilter,
    rankBy: ["vector", "ANN", number[]] | TermsRanking,
    ns: Namespace,
  ): Promise<Array<{ id: string; $dist: number }> | null>;
  async #query(
    operation: string,
    k: number,
    filter: BackendFilter,
    rankBy: ["vector", "ANN", number[]] | TermsRanking,
    ns?: Namespace,
  ): Promise<Array<{ id: string; $dist: number }> | null> {
    if (!Number.isInteger(k) || k < 1) return [];
    const filters = toFilters(filter);
    // A namespace is created by its first write; before that every query is a 404.
    const response = await this.#call(
      operation,
      () =>
        (ns ?? this.#ns).query(
          { rank_by: rankBy, top_k: Math.min(k, MAX_TOP_K), ...(filters && { filters }) },
          this.#requestOptions,
        ),
      { notFound: ns ? null : { rows: [] } },
      ns ? this.#piecesName : this.namespace,
    );
    if (response === null) return null;
    const parsed = QueryRows.safeParse(response);
    if (!parsed.success) {
      throw new TurbopufferBackendError(
        `Turbopuffer ${operation} on namespace ${ns ? this.#piecesName : this.namespace} returned an unexpected body: ${z.prettifyError(parsed.error)}`,
        undefined,
        false,
      );
    }
    return parsed.data.rows;
  }

  /** Runs one client call and turns its failures into `TurbopufferBackendError`s that name the call. */
  async #call<T, F = never>(
    operation: string,
    run: () => Promise<T>,
    onMissing?: { notFound: F },
    namespace = this.namespace,
  ): Promise<T | F> {
    try {
      return await run();
    } catch (err) {
      if (onMissing && err instanceof NotFoundError) return onMissing.notFound;
      const where = `Turbopuffer ${operation} on namespace ${namespace}`;
      if (err instanceof APIConnectionTimeoutError) {
        throw new TurbopufferBackendError(`${where} timed out`, undefined, true, { cause: err });
      }
      if (err instanceof APIError) {
        const detail = errorDetail(err.error) ?? err.message;
        const status = err.status === undefined ? "could not connect" : `failed with ${err.status}`;
        throw new TurbopufferBackendError(`${where} ${status}: ${detail}`, err.status, false, { cause: err });
      }
      throw err;
    }
  }
}

/** A piece's row id in the pieces' namespace: its entry's id and its place among the entry's pieces. */
const pieceId = (id: string, piece: number) => `${id}.${piece}`;

/** Turbopuffer's errors are `{ "status": "error", "error": "<message>" }`. */
function errorDetail(body: unknown): string | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const message = (body as { error?: unknown }).error;
  return typeof message === "string" ? message : undefined;
}

function toFilters({ pathPrefix, language }: BackendFilter): Filter | undefined {
  const clauses: Filter[] = [];
  // Encrypted segments are base64url, which has no glob metacharacter, so the prefix is literal.
  if (pathPrefix) clauses.push(["path", "Glob", `${pathPrefix}/**`]);
  if (language !== undefined) clauses.push(["language", "Eq", language]);
  if (clauses.length === 0) return undefined;
  return clauses.length === 1 ? clauses[0] : ["And", clauses];
}
