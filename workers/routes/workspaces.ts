import { Hono, type Context } from "hono";
import { CreateWorkspaceRequest, type WorkspaceDetail } from "../../protocol/schemas.js";
import {
  CommitRequest,
  DiffRequest,
  ReembedRequest,
  SearchRequest,
  StageRequest,
  type ChunkUpload,
  type CommitResponse,
  type SearchResponse,
  type StageResponse,
} from "../../protocol/sync.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type {
  BackendFailure,
  DimensionMismatch,
  StagedMissing,
  StagingFull,
  TreeFull,
  IndexedChunk,
  OtherModel,
} from "../../durable-objects/workspace.js";
import type { SearchInput } from "../../durable-objects/workspace-rpc.js";
import type { AppEnv } from "../app-env.js";
import { loadIndexConfig } from "../config.js";
import { database } from "../db/client.js";
import {
  embedderFor,
  embedderForModel,
  embeddingProblem,
  EmbeddingError,
  embedsInIsolate,
  type Embedder,
  type EmbedKind,
} from "../embedders/index.js";
import { createWorkspace, deleteWorkspace, getWorkspace, listWorkspaces } from "../db/workspaces.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";
import { vectorKey, vectorKeyBytes } from "../vector-key.js";
import { TermKey } from "../../protocol/keyed-terms.js";

const notFound = (id: string) => new ApiError("not_found", `No workspace \`${id}\` in your org.`);

/** The caller's workspace, or 404: another org's workspace is indistinguishable from a missing one. */
async function ownWorkspace(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  const workspace = await getWorkspace(database(c.env.DB), c.get("principal").org.id, id);
  if (!workspace) throw notFound(id);
  return { workspace, stub: workspaceStub(c.env, workspace.id) };
}

/** The edge's embedder as the Workspace object is told of it: vectors of another model start a re-embed. */
const edgeEmbedder = (c: Context<AppEnv>): { model: string; dims?: number } => {
  const embedder = embedderFor(c.env, c.get("requestId"));
  try {
    return { model: embedder.model, dims: embedder.dims };
  } catch {
    // A remote embedder learns its size from its first answer; the object then goes by the vectors.
    return { model: embedder.model };
  }
};

/** The edge's embedder for a status: a misconfigured one leaves status working, without `reembed`. */
const statusEmbedder = (c: Context<AppEnv>) => {
  try {
    return edgeEmbedder(c);
  } catch {
    return undefined;
  }
};

/**
 * Runs a Durable Object call, reports its duration as Server-Timing, maps "gone" to 404, and
 * vectors of a size the workspace does not expect of their model (inconsistent input: another
 * model's vectors start a re-embed instead), a commit that would take the tree past its total or
 * names parts that were not staged, and a part past the staging bound to 409.
 */
type Refusal = DimensionMismatch | BackendFailure | TreeFull | StagedMissing | StagingFull;
async function timed<T extends object>(
  c: Context<AppEnv>,
  id: string,
  call: () => Promise<T | null>,
): Promise<Exclude<T, Refusal>> {
  const started = performance.now();
  const result = await call();
  c.header("Server-Timing", `workspace;dur=${(performance.now() - started).toFixed(1)}`);
  if (result === null) throw notFound(id);
  if ("mismatch" in result) {
    const { expected, got } = (result as DimensionMismatch).mismatch;
    throw new ApiError(
      "conflict",
      `Workspace \`${id}\` expects ${expected}-dimensional embeddings from this model; the request carries ${got}.`,
    );
  }
  if ("treeFull" in result) {
    const { limit } = (result as TreeFull).treeFull;
    throw new ApiError(
      "conflict",
      `This commit would take workspace \`${id}\` past ${limit} bytes in all; nothing was committed. Delete files first.`,
    );
  }
  if ("stagedMissing" in result) {
    const { upsert, parts } = (result as StagedMissing).stagedMissing;
    throw new ApiError(
      "conflict",
      `upserts.${upsert} names staged parts this workspace does not hold (${parts.join(", ")}): never staged, staged for another hash, or dropped after a day. Stage them again; nothing was committed.`,
      { extra: { upsert, missingParts: parts } },
    );
  }
  if ("stagingFull" in result) {
    const { limit } = (result as StagingFull).stagingFull;
    throw new ApiError(
      "conflict",
      `Workspace \`${id}\` already holds ${limit} bytes of staged parts no commit has claimed; commit them, or wait a day for them to be dropped.`,
      { extra: { stagedLimitBytes: limit } },
    );
  }
  if ("backendFailure" in result) {
    const { timedOut, message } = (result as BackendFailure).backendFailure;
    console.error(JSON.stringify({ level: "error", requestId: c.get("requestId"), message }));
    throw new ApiError(
      timedOut ? "upstream_timeout" : "upstream_failure",
      timedOut ? "The index backend did not answer in time; retry." : "The index backend failed; retry.",
    );
  }
  return result as Exclude<T, Refusal>;
}

/**
 * Every text embedded (the embedder batches them) and the rotation for the embedder's size. A
 * failure answers a problem before anything reaches the Durable Object, so a commit is applied
 * whole or not at all.
 */
async function embed(
  c: Context<AppEnv>,
  keyBytes: Uint8Array,
  texts: string[],
  kind: EmbedKind,
  embedder: Embedder = embedderFor(c.env, c.get("requestId")),
) {
  let vectors: Float32Array[];
  try {
    vectors = await embedder.embed(texts, kind);
  } catch (err) {
    if (err instanceof EmbeddingError) throw embeddingProblem(err, c.get("requestId"), embedder.model);
    throw err;
  }
  return { vectors, key: vectorKey(keyBytes, embedder.dims) };
}

/** A chunk's rotated vector, and its definition pieces' where the embedder makes them. */
interface ChunkVectors {
  vector: Float32Array;
  pieces: Float32Array[];
}

/**
 * The rotated vectors of every chunk: from the workspace's embedding cache where it already holds
 * one for the same keyed chunk id and model (a moved file, the unchanged functions of an edited
 * one), embedded otherwise, with the chunk's definition pieces (`documentPieces`) in the same call.
 * The cache is used with remote embedders that make no pieces only: the built-in embedder is
 * cheaper than the lookup, and the cache holds one vector per chunk.
 */
async function chunkVectors(
  c: Context<AppEnv>,
  stub: ReturnType<typeof workspaceStub>,
  keyBytes: Uint8Array,
  chunks: { id: string; text: string }[],
): Promise<{ vectors: ChunkVectors[]; cacheModel: string | undefined; reused: number }> {
  const embedder = embedderFor(c.env, c.get("requestId"));
  const cacheModel = embedsInIsolate(embedder) || embedder.documentPieces ? undefined : embedder.model;
  const cached = cacheModel
    ? ((await stub.cachedVectors(
        cacheModel,
        chunks.map((ch) => ch.id),
        edgeEmbedder(c).dims,
      )) ?? [])
    : [];
  const missing = chunks.flatMap((_, i) => (cached[i] ? [] : [i]));
  const vectors: (ChunkVectors | null)[] = chunks.map((_, i) => (cached[i] ? { vector: cached[i], pieces: [] } : null));
  if (missing.length > 0) {
    const pieces = missing.map((i) => embedder.documentPieces?.(chunks[i]!.text) ?? []);
    const fresh = await embed(c, keyBytes, [...missing.map((i) => chunks[i]!.text), ...pieces.flat()], "document");
    const rotate = (v: Float32Array) => fresh.key.rotation.apply(v);
    let next = missing.length;
    missing.forEach((i, j) => {
      const own = fresh.vectors.slice(next, (next += pieces[j]!.length));
      vectors[i] = { vector: rotate(fresh.vectors[j]!), pieces: own.map(rotate) };
    });
  }
  return { vectors: vectors as ChunkVectors[], cacheModel, reused: chunks.length - missing.length };
}

/** A file's chunks as the index holds them: rotated vectors, and keyed terms of the text, its names and the path. */
function indexedChunks(
  file: { path: string; language: IndexedChunk["language"]; pathTerms: number[]; chunks: ChunkUpload[] },
  vectors: ChunkVectors[],
  terms: TermKey,
): IndexedChunk[] {
  return file.chunks.map((chunk, i) => ({
    path: file.path,
    chunkId: chunk.id,
    startLine: chunk.startLine,
    endLine: chunk.endLine,
    language: file.language,
    vector: vectors[i]!.vector,
    ...(vectors[i]!.pieces.length > 0 ? { pieces: vectors[i]!.pieces } : {}),
    terms: TermKey.withExtra(terms.chunk(chunk.text), file.pathTerms),
  }));
}

export const workspaces = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .post("/", async (c) => {
    const { name } = await jsonBody(c, CreateWorkspaceRequest);
    const org = c.get("principal").org;
    const workspace = await createWorkspace(database(c.env.DB), org.id, name);
    await workspaceStub(c.env, workspace.id).init({
      workspaceId: workspace.id,
      orgId: org.id,
      createdAt: workspace.createdAt,
    });
    return c.json(workspace, 201);
  })
  .get("/", async (c) => c.json({ data: await listWorkspaces(database(c.env.DB), c.get("principal").org.id) }))
  .get("/:id", async (c) => {
    const { workspace, stub } = await ownWorkspace(c);
    const tree = await timed(c, workspace.id, () => stub.status(statusEmbedder(c)));
    return c.json({ ...workspace, tree } satisfies WorkspaceDetail);
  })
  .delete("/:id", async (c) => {
    const db = database(c.env.DB);
    const { workspace, stub } = await ownWorkspace(c);
    // Object state first: if the D1 delete then fails, a retry still finds the row and finishes.
    await stub.destroy();
    await deleteWorkspace(db, workspace.id);
    return c.body(null, 204);
  })
  .get("/:id/tree", async (c) => {
    const { workspace, stub } = await ownWorkspace(c);
    const status = await timed(c, workspace.id, () => stub.status(statusEmbedder(c)));
    return c.json({ ...status, maxBodyBytes: c.get("config").MAX_BODY_BYTES });
  })
  .post("/:id/tree/diff", async (c) => {
    const body = await jsonBody(c, DiffRequest);
    const { workspace, stub } = await ownWorkspace(c);
    return c.json(await timed(c, workspace.id, () => stub.diff(body)));
  })
  .post("/:id/tree/reembed", async (c) => {
    const body = await jsonBody(c, ReembedRequest);
    const { workspace, stub } = await ownWorkspace(c);
    return c.json(await timed(c, workspace.id, () => stub.reembedded(body)));
  })
  .post("/:id/tree/commit", async (c) => {
    const body = await jsonBody(c, CommitRequest);
    const texts = body.upserts.flatMap((u) => u.chunks.map((chunk) => chunk.text));
    const keyBytes = texts.length > 0 ? vectorKeyBytes(c) : undefined;
    // A misconfigured backend fails here, clearly, before anything is embedded.
    if (texts.length > 0) loadIndexConfig(c.env);
    const { workspace, stub } = await ownWorkspace(c);
    // Embedded here, in the Worker, so the text and the key stop at this request.
    const uploaded = body.upserts.flatMap((u) => u.chunks);
    const { vectors, cacheModel, reused } = keyBytes
      ? await chunkVectors(c, stub, keyBytes, uploaded)
      : { vectors: [], cacheModel: undefined, reused: 0 };
    const terms = keyBytes ? new TermKey(keyBytes) : undefined;
    let next = 0;
    const chunks = body.upserts.flatMap((u) =>
      indexedChunks(u, vectors.slice(next, (next += u.chunks.length)), terms!),
    );
    if (uploaded.length > 0) c.header("Sextant-Embeddings", `embedded=${uploaded.length - reused}, reused=${reused}`);
    const tree = {
      upserts: body.upserts.map(({ path, hash, size, stagedParts }) => ({ path, hash, size, stagedParts })),
      deletes: body.deletes,
    };
    return c.json(
      await timed(
        c,
        workspace.id,
        () =>
          stub.commit(tree, chunks, {
            ...(cacheModel ? { cacheModel } : {}),
            embedder: edgeEmbedder(c),
          }) as Promise<CommitResponse | Refusal | null>,
      ),
    );
  })
  .post("/:id/tree/stage", async (c) => {
    const body = await jsonBody(c, StageRequest);
    const keyBytes = vectorKeyBytes(c);
    loadIndexConfig(c.env);
    const { workspace, stub } = await ownWorkspace(c);
    const { vectors, reused } = await chunkVectors(c, stub, keyBytes, body.chunks);
    c.header("Sextant-Embeddings", `embedded=${body.chunks.length - reused}, reused=${reused}`);
    const part = {
      path: body.path,
      hash: body.hash,
      part: body.part,
      chunks: indexedChunks(body, vectors, new TermKey(keyBytes)),
    };
    return c.json(
      await timed(
        c,
        workspace.id,
        () => stub.stage(part, { embedder: edgeEmbedder(c) }) as Promise<StageResponse | Refusal | null>,
      ),
    );
  })
  .post("/:id/search", async (c) => {
    const body = await jsonBody(c, SearchRequest);
    const keyBytes = vectorKeyBytes(c);
    loadIndexConfig(c.env);
    const { workspace, stub } = await ownWorkspace(c);
    const termKey = new TermKey(keyBytes);
    const questionEmbedder = embedderFor(c.env, c.get("requestId"));
    const weigh = questionEmbedder.questionTermWeight?.();
    const asked = termKey.weightedQuestion(body.query, weigh);
    const query = {
      terms: asked.ids.slice(0, 512),
      ...(weigh ? { termWeights: asked.weights.slice(0, 512) } : {}),
      ...(body.translations ? { translated: termKey.translated(body.translations) } : {}),
      ...(body.translations && weigh ? { translatedWeights: body.translations.map((w) => weigh(w.term)) } : {}),
      topK: body.topK,
      ...(body.pathPrefix ? { pathPrefix: body.pathPrefix } : {}),
      ...(body.language ? { language: body.language } : {}),
    };
    const search = async (input: SearchInput) =>
      timed(
        c,
        workspace.id,
        () => stub.search(input) as Promise<SearchResponse | OtherModel | DimensionMismatch | BackendFailure | null>,
      );
    const ours = await questionVector(c, keyBytes, body.query, questionEmbedder);
    const answer = await search({ ...query, ...ours });
    if (!("otherModel" in answer)) return c.json(answer);
    // Indexed by another model (the client has not re-synced since the edge's embedder changed):
    // the question in that model's space where this edge still has it, else keyed terms alone; and
    // in ours for the files already moved to it that the old index no longer holds.
    const { model, dims } = answer.otherModel;
    const theirs = model === null ? undefined : embedderForModel(c.env, c.get("requestId"), model);
    const old = theirs?.dims === dims ? await questionVector(c, keyBytes, body.query, theirs) : {};
    const again = await search({ ...query, ...old, pending: ours });
    if ("otherModel" in again) throw new ApiError("conflict", `Workspace \`${workspace.id}\` changed model; retry.`);
    return c.json(again);
  });

/** A question's rotated vector from `embedder`, and the model that made it. */
async function questionVector(c: Context<AppEnv>, keyBytes: Uint8Array, question: string, embedder: Embedder) {
  const { vectors, key } = await embed(c, keyBytes, [question], "query", embedder);
  return { vector: key.rotation.apply(vectors[0]!), model: embedder.model };
}
