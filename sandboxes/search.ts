/**
 * codebase_search on the host: the task's tree is a directory (`base`) of an indexed workspace, and
 * the host holds that workspace's secret in memory for the sandbox's life. It turns the tool's
 * arguments into the edge's search request, and the edge's answer into hits read from the tree, with
 * the same code as `sextant search` (`client/workspace/hits.ts`): paths decrypted, lines read from the
 * tree as it is now, each chunk's keyed id checked so a hit in a file the agent changed says so.
 */
import { posix } from "node:path";
import type { SearchPrepareResponse } from "../protocol/agents/sandbox.js";
import type { TaskWorkspace } from "../protocol/agents/task.js";
import type { SearchResponse } from "../protocol/sync.js";
import { renderHits } from "../client/workspace/render-hits.js";
import { resolveHits, searchRequest, type LocalHit } from "../client/workspace/hits.js";
import { WorkspaceSecret } from "../client/workspace/secret.js";

/** A codebase_search scope that is not a directory of the task's tree. */
export class OutsideTree extends Error {
  override readonly name = "OutsideTree";
}

export interface SearchArgs {
  query: string;
  topK: number;
  path?: string | undefined;
}

export class TaskIndex {
  readonly #secret: WorkspaceSecret;
  readonly #base: string;

  constructor(readonly workspace: Required<Pick<TaskWorkspace, "id" | "secret" | "base">>) {
    this.#secret = new WorkspaceSecret(Buffer.from(workspace.secret, "base64url"));
    this.#base = workspace.base;
  }

  /** The workspace path of a tree path ("." or undefined for the tree's root). */
  #toWorkspace(path: string | undefined): string | undefined {
    const normal = posix.normalize(path ?? ".").replace(/\/+$/, "");
    if (normal === ".." || normal.startsWith("../") || normal.startsWith("/"))
      throw new OutsideTree(`${path} is outside the task's tree.`);
    const within = normal === "." ? "" : normal;
    const full = [this.#base, within].filter(Boolean).join("/");
    return full === "" ? undefined : full;
  }

  /** The tree path of a workspace path, or undefined when it is outside the task's tree. */
  #toTree(path: string): string | undefined {
    if (this.#base === "") return path;
    return path.startsWith(`${this.#base}/`) ? path.slice(this.#base.length + 1) : undefined;
  }

  prepare(args: SearchArgs): SearchPrepareResponse {
    const within = this.#toWorkspace(args.path);
    return {
      workspaceId: this.workspace.id,
      vectorKey: this.#secret.vectorKey,
      request: searchRequest(this.#secret, args.query, { topK: args.topK, ...(within ? { within } : {}) }),
    };
  }

  /**
   * The hits of the edge's answer, with their lines from `read` (a file of the task's tree as it is
   * now); paths relative to the tree, as the agent's other tools take them.
   */
  async resolve(
    read: (treePath: string) => Promise<string>,
    args: SearchArgs & { answer: SearchResponse },
  ): Promise<{ results: Pick<LocalHit, "path" | "startLine" | "endLine" | "score" | "stale">[]; text: string }> {
    const within = args.path && args.path !== "." ? args.path.replace(/\/+$/, "") : undefined;
    const found = await resolveHits(this.#secret, args.answer, args.query, {
      topK: args.topK,
      read: async (path) => {
        const local = this.#toTree(path);
        if (local === undefined) return null;
        try {
          // The tree was uploaded with its secrets withheld, as the index was: what the index saw is the file.
          const text = await read(local);
          return { text, raw: text };
        } catch {
          return null;
        }
      },
    });
    // Hits outside the task's tree (the workspace above `base`) are not the agent's to read.
    const hits = found.flatMap((hit) => {
      const path = this.#toTree(hit.path);
      if (path === undefined) return [];
      const copies = hit.copies.flatMap((c) => {
        const p = this.#toTree(c.path);
        return p === undefined ? [] : [{ ...c, path: p }];
      });
      return [{ ...hit, path, copies }];
    });
    // The text is what the model reads (the same blocks as `sextant mcp`); `results` lists the hits without their lines.
    return {
      results: hits.map(({ path, startLine, endLine, score, stale }) => ({ path, startLine, endLine, score, stale })),
      text: renderHits("the task's tree", hits, within),
    };
  }
}
