import { parseStaticModel, type StaticModel } from "../../protocol/embedder/static.js";
// Data and Text modules (wrangler.toml `[[rules]]`), not R2 objects: the model is part of the code's
// version, so the query side and the document side can never be embedded by two different models
// mid-deploy, a deployment replaces both atomically, and a cold isolate reads them from its own
// bundle with no R2 round trip or cache miss before its first embedding. The cost is bundle size
// (docs/configuration.md, "Embedders": about 2.6 MB raw for 20k terms × 128 dims, under the 3 MB
// compressed cap `npm run check` enforces).
import weights from "../../protocol/embedder/model/weights.bin";
import vocab from "../../protocol/embedder/model/vocab.txt";

let model: StaticModel | undefined;

/**
 * The model shipped with this deployment, parsed on first use and kept for the isolate's life:
 * parsing dequantises the whole table, which only the first request of an isolate should pay.
 */
export function bundledStaticModel(): StaticModel {
  model ??= parseStaticModel(weights, vocab);
  return model;
}
