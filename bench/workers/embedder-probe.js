/**
 * The edge's two built-in embedders in a Worker of their own, for the cold-start benchmark
 * (`bench/embedder-coldstart.ts` bundles it with the model as Data and Text modules, as the
 * deployment ships them). `GET /?embedder=static|lexical&chunks=N` embeds N chunks of 1,200
 * characters, cut at different offsets from the source file in the binding SOURCE, and answers when
 * done. The chunks are made here rather than sent, so that a request's time is the embedding's,
 * not the upload's. The static embedder is the edge's built-in one, which embeds each chunk's
 * definition pieces in the same call as the chunk (`chunkVectors` in `workers/routes/workspaces.ts`).
 */
import { LexicalEmbedder } from "../../workers/embedders/builtin.ts";
import { StaticEmbedder } from "../../workers/embedders/static.ts";
import { bundledStaticModel } from "../../workers/embedders/static-model.ts";

const embedders = { static: new StaticEmbedder(bundledStaticModel, { pieces: true }), lexical: new LexicalEmbedder() };
const CHUNK_CHARS = 1200;

function chunks(source, n) {
  const span = source.length - CHUNK_CHARS;
  return Array.from({ length: n }, (_, i) => source.slice((i * 389) % span, ((i * 389) % span) + CHUNK_CHARS));
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const embedder = embedders[url.searchParams.get("embedder") ?? ""];
    if (!embedder) return new Response("embedder must be static or lexical", { status: 400 });
    const texts = chunks(env.SOURCE, Number(url.searchParams.get("chunks") ?? 1));
    const pieces = texts.flatMap((text) => embedder.documentPieces?.(text) ?? []);
    const vectors = await embedder.embed([...texts, ...pieces], "document");
    return Response.json({ model: embedder.model, dims: embedder.dims, vectors: vectors.length });
  },
};
