/**
 * Workspace sync, protocol version 2. Paths are encrypted segments joined by "/"; hashes and
 * chunk ids are keyed, lower-case hex. Version 2 carries each changed file's chunks (secrets
 * already removed on the device): the edge embeds them and drops the text, and commits the file
 * only once its vectors are stored.
 */
import { z } from "zod";
import { MAX_ALTERNATIVES, MAX_TRANSLATED_WORDS, MAX_TRANSLATION_TERM_CHARS } from "./embedder/translation.js";
import { parentOf } from "./merkle.js";

export const SYNC_PROTOCOL = 2;

/** The client's 32-byte vector key, base64url, sent with every request that embeds or searches. */
export const VECTOR_KEY_HEADER = "Sextant-Vector-Key";
export const MAX_CHUNK_CHARS = 8000;
export const MAX_QUERY_CHARS = 2000;
export const MAX_PATH_TERMS = 64;

/** An encrypted segment: base64url of at least a 16-byte tag and a 16-byte block. */
export const SEGMENT = /^[A-Za-z0-9_-]{43,400}$/;
export const MAX_DEPTH = 64;
export const MAX_PATH_LENGTH = 8192;
/** Entries per commit, and nodes per diff answer: bounds one request's work in the Durable Object. */
export const MAX_COMMIT_ENTRIES = 2000;
/**
 * The largest file a commit can describe, and the ceiling of the client's `--max-file-bytes`: a
 * file's chunks travel in one commit, and no edge accepts a body over 100 MiB (the most
 * `MAX_BODY_BYTES` can be set to).
 */
export const MAX_FILE_BYTES = 100 * 1024 * 1024;
/** A tree's total size: beyond it, a total stops being an exact number in JSON and in JavaScript. */
export const MAX_TREE_BYTES = Number.MAX_SAFE_INTEGER;
export const MAX_DIFF_NODES = 5000;
/**
 * Parts one file's chunks may be staged in before the commit that upserts it (`tree/stage`): a file
 * whose chunks no single request body holds is sent over several. 1,000 parts of a 1 MiB body
 * each hold the chunks of the largest file a commit can describe.
 */
export const MAX_STAGED_PARTS = 1000;
export const StagedPartNumber = z
  .number()
  .int()
  .min(0)
  .max(MAX_STAGED_PARTS - 1);
export const MAX_DIFF_DIRS = 500;

/** Languages a chunk can be tagged with (by file extension on the device); a search can filter by one. */
export const LANGUAGE_CODES = ["text", "typescript", "tsx", "javascript", "python", "go", "rust", "java"] as const;
export const Language = z.enum(LANGUAGE_CODES);
export type Language = z.infer<typeof Language>;

export const Hash = z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lower-case hex characters");

export const EncryptedPath = z
  .string()
  .max(MAX_PATH_LENGTH)
  .refine((path) => {
    const segments = path.split("/");
    return segments.length <= MAX_DEPTH && segments.every((s) => SEGMENT.test(s));
  }, "must be encrypted path segments joined by '/'");

/** The root directory is the empty path. */
export const DirPath = z.union([z.literal(""), EncryptedPath]);

const protocol = z.literal(SYNC_PROTOCOL, { error: `this edge speaks sync protocol ${SYNC_PROTOCOL}` });

export const TreeStatus = z.object({
  protocol: z.literal(SYNC_PROTOCOL),
  root: Hash,
  files: z.number().int().nonnegative(),
  bytes: z.number().int().nonnegative().max(MAX_TREE_BYTES),
  lastSyncAt: z.iso.datetime().nullable(),
  /**
   * The most bytes one request body may hold on this edge (`MAX_BODY_BYTES`), so a client sizes its
   * commits and staged parts to it. Absent from edges that predate it: assume 1 MiB.
   */
  maxBodyBytes: z.number().int().positive().optional(),
  /**
   * The embedding model whose vectors the index holds (searches use it), or null before the first
   * vectors or when an index from before models were recorded cannot be named. Absent from edges
   * that predate it.
   */
  model: z.string().nullable().optional(),
  /** The edge's embedder: what every file's chunks are embedded with when they are sent. */
  embedder: z.string().optional(),
  /**
   * True when the index was made by another model than the edge's embedder: searches still work
   * (with that model where the edge still has it, else by keyed terms alone), and the client
   * re-sends every file's chunks (same paths and hashes) so the edge can move the index to its
   * embedder; the index switches once every file has arrived.
   */
  reembed: z.boolean().optional(),
});
export type TreeStatus = z.infer<typeof TreeStatus>;

export const DiffRequest = z.strictObject({
  protocol,
  /** Directories whose subtrees the client wants, breadth-first. */
  dirs: z.array(DirPath).min(1).max(MAX_DIFF_DIRS),
  /** Stop adding levels once this many nodes are in the answer. */
  budget: z.number().int().min(1).max(MAX_DIFF_NODES).default(MAX_DIFF_NODES),
});
export type DiffRequest = z.input<typeof DiffRequest>;

/** How many files one page of `POST …/tree/reembed` lists at most. */
export const MAX_REEMBED_PAGE = 5000;

/**
 * `POST /v1/workspaces/{id}/tree/reembed`: while the index moves to the edge's embedder, the files
 * (path and hash, as the tree holds them now) already sent for the new model, in path order after
 * `after`, so a client whose move was interrupted re-sends only the rest.
 */
export const ReembedRequest = z.strictObject({
  protocol,
  after: EncryptedPath.optional(),
  limit: z.number().int().min(1).max(MAX_REEMBED_PAGE).default(MAX_REEMBED_PAGE),
});
export type ReembedRequest = z.input<typeof ReembedRequest>;

export const ReembedResponse = z.object({
  protocol: z.literal(SYNC_PROTOCOL),
  files: z.array(z.object({ path: z.string(), hash: Hash })),
  /** Pass as `after` for the next page; null on the last. */
  next: z.string().nullable(),
});
export type ReembedResponse = z.infer<typeof ReembedResponse>;

export const TreeNode = z.object({ path: z.string(), kind: z.enum(["f", "d"]), hash: Hash });
export type TreeNode = z.infer<typeof TreeNode>;

export const DiffResponse = z.object({
  protocol: z.literal(SYNC_PROTOCOL),
  root: Hash,
  /** Descendants of the requested directories, whole levels only. */
  nodes: z.array(TreeNode),
  /** Directories whose children were not included because the budget ran out. */
  truncated: z.array(z.string()),
});
export type DiffResponse = z.infer<typeof DiffResponse>;

export const ChunkUpload = z
  .strictObject({
    /** Keyed hash of the text (HMAC under a key derived from the workspace secret). */
    id: Hash,
    /** Never empty: a chunk without text has nothing to embed or match. */
    text: z.string().min(1).max(MAX_CHUNK_CHARS),
    startLine: z.number().int().positive(),
    endLine: z.number().int().positive(),
  })
  .refine((chunk) => chunk.startLine <= chunk.endLine, {
    path: ["endLine"],
    message: "must not be before startLine",
  });
export type ChunkUpload = z.infer<typeof ChunkUpload>;

/** A file's size in bytes, as the device read it. */
export const FileSize = z.number().int().nonnegative().max(MAX_FILE_BYTES);

export const Upsert = z.strictObject({
  path: EncryptedPath,
  hash: Hash,
  size: FileSize,
  /** The file's language, for search filters; "text" when it has no grammar. */
  language: Language.default("text"),
  /**
   * Keyed ids of the words of the file's path (see keyed-terms.ts), computed on the device: the
   * lexical channel matches a query's words against the path without the path leaving in the clear.
   */
  pathTerms: z.array(z.number().int().min(0).max(0xffffffff)).max(MAX_PATH_TERMS).default([]),
  chunks: z.array(ChunkUpload).max(2000).default([]),
  /**
   * How many parts of this file's chunks were staged before this commit (`tree/stage`, parts 0 to
   * n-1, for this path and hash): the file is committed with those chunks and its own. 0 when all
   * of its chunks are in this upsert.
   */
  stagedParts: z.number().int().min(0).max(MAX_STAGED_PARTS).default(0),
});
export type Upsert = z.input<typeof Upsert>;

const TranslationTerm = z.string().min(1).max(MAX_TRANSLATION_TERM_CHARS);

/** A question word and the code terms it translates to (`translateQuestion`, protocol/embedder/translation.ts). */
export const TranslatedWord = z
  .strictObject({
    term: TranslationTerm,
    alternatives: z.array(TranslationTerm).max(MAX_ALTERNATIVES),
    probabilities: z.array(z.number().min(0).max(1)).max(MAX_ALTERNATIVES),
  })
  .refine((w) => w.alternatives.length === w.probabilities.length, {
    message: "alternatives and probabilities must be as long as each other",
  });

export const SearchRequest = z.strictObject({
  protocol,
  query: z.string().trim().min(1).max(MAX_QUERY_CHARS),
  topK: z.number().int().min(1).max(100).default(10),
  /** An encrypted directory: only files below it are searched. */
  pathPrefix: EncryptedPath.optional(),
  language: Language.optional(),
  /**
   * The question's words translated to code terms by the client's translation table: the edge keys
   * them with the request's vector key, as it keys the question's own terms, and ranks a third
   * channel with them. Absent: the vector and lexical channels alone.
   */
  translations: z.array(TranslatedWord).max(MAX_TRANSLATED_WORDS).optional(),
});
export type SearchRequest = z.input<typeof SearchRequest>;

export const SearchHit = z.object({
  path: z.string(),
  startLine: z.number().int(),
  endLine: z.number().int(),
  chunkId: Hash,
  /** The fused score (`fuseScores`, or `fuseThree` with translations; protocol/fusion.ts). */
  score: z.number(),
  /** Each channel's own score, or null when that channel did not return the chunk. */
  channels: z.object({
    vector: z.number().nullable(),
    lexical: z.number().nullable(),
    /** The translation channel's log-likelihood; absent when the search sent no translations. */
    translation: z.number().nullable().optional(),
  }),
});
export type SearchHit = z.infer<typeof SearchHit>;

export const SearchResponse = z.object({
  protocol: z.literal(SYNC_PROTOCOL),
  /** The Merkle root the results were served from. */
  root: Hash,
  results: z.array(SearchHit),
  /**
   * How the results were ranked: `hybrid` (vectors and keyed terms), or `lexical` (keyed terms
   * alone: the index was made by a model this edge no longer has, until the client re-syncs).
   */
  mode: z.enum(["hybrid", "lexical"]).optional(),
  /** The model whose vectors ranked the results (the index's); absent when `mode` is `lexical`. */
  model: z.string().optional(),
});
export type SearchResponse = z.infer<typeof SearchResponse>;

/** Issues reported for one commit: enough to fix it, and a problem document that stays small. */
const MAX_COMMIT_ISSUES = 20;

interface CommitIssue {
  path: (string | number)[];
  message: string;
}

/**
 * The paths of a commit must say one thing: no file upserted twice, none both upserted and
 * deleted, and no file upserted together with a path below it (it would have to be a file and a
 * directory at once). Deletes apply before upserts, so deleting `a` while upserting `a/b` (a file
 * that became a directory), or the reverse, is an ordinary replacement.
 */
export function commitPathIssues(upserts: readonly { path: string }[], deletes: readonly string[]): CommitIssue[] {
  const issues: CommitIssue[] = [];
  const first = new Map<string, number>();
  upserts.forEach(({ path }, i) => {
    const earlier = first.get(path);
    if (earlier === undefined) first.set(path, i);
    else
      issues.push({ path: ["upserts", i, "path"], message: `\`${path}\` is already upserted as upserts.${earlier}` });
  });
  upserts.forEach(({ path }, i) => {
    for (let dir = parentOf(path); dir !== ""; dir = parentOf(dir)) {
      const file = first.get(dir);
      if (file === undefined) continue;
      issues.push({
        path: ["upserts", i, "path"],
        message: `\`${path}\` is below \`${dir}\`, which upserts.${file} makes a file in the same commit`,
      });
      break;
    }
  });
  deletes.forEach((path, i) => {
    const upserted = first.get(path);
    if (upserted !== undefined)
      issues.push({ path: ["deletes", i], message: `\`${path}\` is both deleted and upserted (upserts.${upserted})` });
  });
  return issues.slice(0, MAX_COMMIT_ISSUES);
}

/**
 * A chunk id is the keyed hash of its text, so within a commit one id always carries one text;
 * the same chunk (id and lines) listed twice for one file is a duplicate. Identical chunks in
 * different places (a copied file, a repeated block) share an id and are fine.
 */
function chunkIssues(upserts: readonly { chunks: readonly ChunkUpload[] }[]): CommitIssue[] {
  const issues: CommitIssue[] = [];
  const textOf = new Map<string, string>();
  upserts.forEach(({ chunks }, i) => {
    const seen = new Set<string>();
    chunks.forEach((chunk, j) => {
      const text = textOf.get(chunk.id);
      if (text === undefined) textOf.set(chunk.id, chunk.text);
      else if (text !== chunk.text)
        issues.push({ path: ["upserts", i, "chunks", j, "id"], message: "the same chunk id with another text" });
      const key = `${chunk.id} ${chunk.startLine} ${chunk.endLine}`;
      if (seen.has(key))
        issues.push({ path: ["upserts", i, "chunks", j], message: "the same chunk twice in one file" });
      seen.add(key);
    });
  });
  return issues.slice(0, MAX_COMMIT_ISSUES);
}

/** A refinement for every schema of a commit: the request the edge validates, and the Durable Object's input. */
export function checkCommitPaths(
  commit: { upserts: readonly { path: string }[]; deletes: readonly string[] },
  ctx: z.RefinementCtx,
): void {
  for (const issue of commitPathIssues(commit.upserts, commit.deletes)) ctx.addIssue({ code: "custom", ...issue });
}

export const CommitRequest = z
  .strictObject({
    protocol,
    upserts: z.array(Upsert).max(MAX_COMMIT_ENTRIES).default([]),
    deletes: z.array(EncryptedPath).max(MAX_COMMIT_ENTRIES).default([]),
  })
  .refine((c) => c.upserts.length + c.deletes.length <= MAX_COMMIT_ENTRIES, {
    message: `at most ${MAX_COMMIT_ENTRIES} upserts and deletes in one commit`,
  })
  .superRefine(checkCommitPaths)
  .superRefine((c, ctx) => {
    for (const issue of chunkIssues(c.upserts)) ctx.addIssue({ code: "custom", ...issue });
  });
export type CommitRequest = z.input<typeof CommitRequest>;

/**
 * One part of a file's chunks, sent ahead of the commit that upserts the file because its chunks
 * do not fit one request body with it. The edge embeds them and holds them, keyed like the index,
 * until a commit upserts the same path and hash with `stagedParts` covering this part; staging a
 * part again replaces it. Unclaimed parts are dropped after a day.
 */
export const StageRequest = z
  .strictObject({
    protocol,
    path: EncryptedPath,
    hash: Hash,
    part: StagedPartNumber,
    language: Language.default("text"),
    pathTerms: z.array(z.number().int().min(0).max(0xffffffff)).max(MAX_PATH_TERMS).default([]),
    chunks: z.array(ChunkUpload).min(1).max(2000),
  })
  .superRefine((stage, ctx) => {
    for (const issue of chunkIssues([stage])) ctx.addIssue({ code: "custom", ...issue, path: issue.path.slice(2) });
  });
export type StageRequest = z.input<typeof StageRequest>;

export const StageResponse = z.object({
  protocol: z.literal(SYNC_PROTOCOL),
  path: z.string(),
  hash: Hash,
  part: z.number().int().nonnegative(),
  /** Chunks this part holds. */
  chunks: z.number().int().nonnegative(),
});
export type StageResponse = z.infer<typeof StageResponse>;

export const CommitResponse = TreeStatus.extend({ applied: z.number().int().nonnegative() });
export type CommitResponse = z.infer<typeof CommitResponse>;
