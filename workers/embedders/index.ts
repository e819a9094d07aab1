import { ConfigError, loadEmbedderConfig, type EmbedderConfig } from "../config.js";
import { ApiError } from "../problem.js";
import { BUILTIN_MODEL } from "../../protocol/embedder/builtin.js";
import { LexicalEmbedder } from "./builtin.js";
import { EmbeddingError, type Embedder } from "./embedder.js";
import { OpenAIEmbedder } from "./openai.js";
import { StaticEmbedder } from "./static.js";
import { bundledStaticModel } from "./static-model.js";

export { EmbeddingError, type Embedder, type EmbedKind } from "./embedder.js";
export { embeddingProblem } from "./problem.js";

/** Each `EMBEDDER` value and how to build it from the validated settings. */
const FACTORIES = {
  builtin: () => new StaticEmbedder(bundledStaticModel, { pieces: true }),
  openai: (config) =>
    new OpenAIEmbedder({
      apiKey: config.EMBEDDING_API_KEY!,
      baseURL: config.EMBEDDING_BASE_URL,
      model: config.EMBEDDING_MODEL!,
      batchSize: config.EMBEDDING_BATCH,
      ...(config.EMBEDDING_DIMENSIONS !== undefined ? { dimensions: config.EMBEDDING_DIMENSIONS } : {}),
    }),
} as const satisfies Record<EmbedderConfig["EMBEDDER"], (config: EmbedderConfig) => Embedder>;

/** One per isolate, so the SDK client and a model's learned dimensions are reused. */
const embedders = new WeakMap<object, Embedder>();

/**
 * The embedder `EMBEDDER` selects. Settings that cannot work answer 500 `internal` naming the
 * settings (never their values): retrying will not help, and only the operator can fix them.
 */
export function embedderFor(env: Env, requestId: string): Embedder {
  const cached = embedders.get(env);
  if (cached) return cached;
  let embedder: Embedder;
  try {
    const config = loadEmbedderConfig(env);
    embedder = FACTORIES[config.EMBEDDER](config);
  } catch (err) {
    if (!(err instanceof ConfigError || err instanceof EmbeddingError)) throw err;
    console.error(JSON.stringify({ level: "error", requestId, message: err.message }));
    throw new ApiError("internal", `The edge's embedder is misconfigured. ${err.message}`);
  }
  embedders.set(env, embedder);
  return embedder;
}

const lexical = new LexicalEmbedder();
const staticAlone = new StaticEmbedder(bundledStaticModel);

/**
 * The embedder that makes vectors of `model`'s space, for a workspace indexed by that model: the
 * configured one when it is that model; the bundled model without definition pieces for an index
 * it made before pieces shipped (its questions' vectors are the same); the retired lexical one for
 * `sextant-lexical-v1` (workspaces indexed before the learned model shipped); otherwise none this
 * edge can run.
 */
export function embedderForModel(env: Env, requestId: string, model: string): Embedder | undefined {
  const configured = embedderFor(env, requestId);
  if (configured.model === model) return configured;
  if (configured instanceof StaticEmbedder && model === staticAlone.model) return staticAlone;
  return model === BUILTIN_MODEL ? lexical : undefined;
}

/**
 * Whether `embedder` runs in the isolate: embedding a chunk again then costs less than looking its
 * vector up in the workspace's cache, so the cache is skipped.
 */
export const embedsInIsolate = (embedder: Embedder): boolean =>
  embedder instanceof StaticEmbedder || embedder instanceof LexicalEmbedder;
