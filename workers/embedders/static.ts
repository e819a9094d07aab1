import { definitionPieces } from "../../protocol/embedder/names.js";
import { embedStatic, ModelTokenizer, questionTermWeights, type StaticModel } from "../../protocol/embedder/static.js";
import type { EmbedKind, Embedder } from "./embedder.js";

/**
 * The learned built-in embedder (`protocol/embedder/static.ts`): a static embedding model, run in
 * the isolate with no network. Questions and code are embedded with their own side's token weights.
 * The model comes from `load`, called on first use, so an isolate that never embeds never parses
 * it; the edge passes the bundled model (`static-model.ts`), Node tools one read from disk.
 *
 * @example
 * const embedder = new StaticEmbedder(bundledStaticModel);
 * const [vector] = await embedder.embed(["export function revokeKey() {}"], "document");
 * vector.length === embedder.dims; // 128
 */
export class StaticEmbedder implements Embedder {
  readonly #load: () => StaticModel;
  readonly documentPieces?: (text: string) => string[];

  /**
   * With `pieces`, each chunk's definition pieces are embedded beside it (`documentPieces`), and the
   * index it makes is another than the model's alone: its name gets `PIECES_SUFFIX`, so a workspace
   * indexed without them moves to it (its client re-sends its files) while the old index serves.
   */
  constructor(load: () => StaticModel, options: { pieces?: boolean } = {}) {
    this.#load = load;
    if (options.pieces) this.documentPieces = (text) => definitionPieces(text);
  }

  get model(): string {
    return this.documentPieces ? `${this.#load().name}${PIECES_SUFFIX}` : this.#load().name;
  }

  get dims(): number {
    return this.#load().dims;
  }

  async embed(texts: string[], kind: EmbedKind): Promise<Float32Array[]> {
    const model = this.#load();
    const tokenizer = new ModelTokenizer();
    return texts.map((text) => embedStatic(model, text, kind, tokenizer));
  }

  questionTermWeight(): (term: string) => number {
    return questionTermWeights(this.#load());
  }
}

/** What an index with definition pieces adds to its model's name: `sextant-static-v2+pieces`. */
export const PIECES_SUFFIX = "+pieces";
