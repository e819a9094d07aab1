import { BUILTIN_DIMS, BUILTIN_MODEL, embedBuiltin } from "../../protocol/embedder/builtin.js";
import { Tokenizer } from "../../protocol/embedder/tokens.js";
import type { EmbedKind, Embedder } from "./embedder.js";

/**
 * The first built-in embedder, `sextant-lexical-v1` (hashed code-aware tokens, no network, no
 * weights), behind the common interface. No longer what `EMBEDDER = "builtin"` selects: it stays to
 * embed queries for workspaces it indexed. Documents and questions are embedded alike: both are
 * bags of the same tokens.
 */
export class LexicalEmbedder implements Embedder {
  readonly model = BUILTIN_MODEL;
  readonly dims = BUILTIN_DIMS;

  async embed(texts: string[], _kind: EmbedKind): Promise<Float32Array[]> {
    const tokenizer = new Tokenizer();
    return texts.map((text) => embedBuiltin(text, BUILTIN_DIMS, tokenizer));
  }
}
