import { depthOf, dirHash, EMPTY_ROOT, nameOf, parentOf, type NodeKind } from "../protocol/merkle.js";
import { MAX_FILE_BYTES, MAX_TREE_BYTES, type TreeNode } from "../protocol/sync.js";

/** A file's leaf: its encrypted path, keyed content hash and size. */
export interface Leaf {
  path: string;
  hash: string;
  size: number;
}

interface NodeRow {
  path: string;
  kind: NodeKind;
  hash: string;
  files: number;
  bytes: number;
  [key: string]: SqlStorageValue;
}

export interface TreeTotals {
  root: string;
  files: number;
  bytes: number;
}

/** A commit that would take the tree's total past MAX_TREE_BYTES; thrown inside, and so rolling back, its transaction. */
export class TreeTooLarge extends Error {
  constructor(readonly bytes: number) {
    super(`The tree would hold ${bytes} bytes, more than ${MAX_TREE_BYTES}.`);
  }
}

/**
 * The Merkle tree of what a workspace has indexed, in the Durable Object's SQLite. Every
 * mutation runs synchronously inside one storage transaction, so a concurrent request can never
 * observe (or interleave with) a half-applied commit, and a crash rolls the whole commit back.
 */
export class MerkleStore {
  constructor(
    private readonly sql: SqlStorage,
    private readonly transaction: <T>(fn: () => T) => T,
  ) {
    sql.exec(`CREATE TABLE IF NOT EXISTS nodes (
      path TEXT PRIMARY KEY,
      parent TEXT,
      kind TEXT NOT NULL CHECK (kind IN ('f', 'd')),
      hash TEXT NOT NULL,
      files INTEGER NOT NULL,
      bytes INTEGER NOT NULL
    ) WITHOUT ROWID`);
    sql.exec("CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent, path)");
    sql.exec(
      "INSERT OR IGNORE INTO nodes (path, parent, kind, hash, files, bytes) VALUES ('', NULL, 'd', ?, 0, 0)",
      EMPTY_ROOT,
    );
  }

  totals(): TreeTotals {
    const root = this.#healed();
    // Only a tree of some 85 million files at the ceiling could still be past the bound here.
    return { root: root.hash, files: root.files, bytes: Math.min(root.bytes, MAX_TREE_BYTES) };
  }

  /** Applies deletes, then upserts, then recomputes every affected directory: all or nothing. */
  commit(upserts: readonly Leaf[], deletes: readonly string[]): TreeTotals {
    return this.transaction(() => this.apply(upserts, deletes));
  }

  /** `commit` without its own transaction, for a caller that holds one around more than the tree. */
  apply(upserts: readonly Leaf[], deletes: readonly string[]): TreeTotals {
    this.#healed();
    {
      const dirty = new Set<string>();
      for (const path of deletes) {
        if (this.#get(path)) this.#removeSubtree(path);
        dirty.add(parentOf(path));
      }
      const knownDirs = new Set<string>([""]);
      for (const { path, hash, size } of upserts) {
        this.#ensureDirs(parentOf(path), knownDirs);
        const existing = this.#get(path);
        if (existing?.kind === "d") {
          this.#removeSubtree(path);
          for (const dir of knownDirs) if (dir === path || dir.startsWith(`${path}/`)) knownDirs.delete(dir);
        }
        this.sql.exec(
          `INSERT INTO nodes (path, parent, kind, hash, files, bytes) VALUES (?, ?, 'f', ?, 1, ?)
           ON CONFLICT (path) DO UPDATE SET kind = 'f', hash = excluded.hash, files = 1, bytes = excluded.bytes`,
          path,
          parentOf(path),
          hash,
          size,
        );
        dirty.add(parentOf(path));
      }
      this.#recompute(dirty);
      const { bytes } = this.#get("")!;
      if (!(bytes <= MAX_TREE_BYTES)) throw new TreeTooLarge(bytes);
      return this.totals();
    }
  }

  /**
   * The root, after repairing what commits stored before sizes were bounded: a leaf could claim
   * any size, and a total past 2^53 is a number no client can read back, so the workspace could
   * never be read again. A total larger than every file at MAX_FILE_BYTES proves such a leaf; those
   * leaves are clamped to the ceiling and every directory's total is recomputed. Sizes are in no
   * hash, so the root and everything a client compares stay the same.
   */
  #healed(): NodeRow {
    const root = this.#get("")!;
    if (Number.isSafeInteger(root.bytes) && root.bytes >= 0 && root.bytes <= root.files * MAX_FILE_BYTES) return root;
    this.transaction(() => {
      this.sql.exec(
        "UPDATE nodes SET bytes = ? WHERE kind = 'f' AND (bytes > ? OR bytes < 0)",
        MAX_FILE_BYTES,
        MAX_FILE_BYTES,
      );
      const dirs = this.sql
        .exec<{ path: string }>("SELECT path FROM nodes WHERE kind = 'd'")
        .toArray()
        .map((row) => row.path)
        .sort((a, b) => depthOf(b) - depthOf(a));
      for (const dir of dirs) {
        this.sql.exec(
          `UPDATE nodes SET
             files = (SELECT coalesce(sum(files), 0) FROM nodes WHERE parent = ?),
             bytes = (SELECT coalesce(sum(bytes), 0) FROM nodes WHERE parent = ?)
           WHERE path = ?`,
          dir,
          dir,
          dir,
        );
      }
    });
    return this.#get("")!;
  }

  /**
   * Descendants of `dirs`, breadth-first and whole directories at a time, until adding the next
   * directory's children would pass `budget`; directories left unexpanded are listed as truncated.
   */
  descendants(dirs: readonly string[], budget: number): { nodes: TreeNode[]; truncated: string[] } {
    const nodes: TreeNode[] = [];
    const queue = dirs.filter((dir) => this.#get(dir)?.kind === "d");
    for (let i = 0; i < queue.length; i++) {
      const children = this.#children(queue[i]!);
      if (nodes.length > 0 && nodes.length + children.length > budget) {
        return { nodes, truncated: queue.slice(i) };
      }
      for (const child of children) {
        nodes.push({ path: child.path, kind: child.kind, hash: child.hash });
        if (child.kind === "d") queue.push(child.path);
      }
    }
    return { nodes, truncated: [] };
  }

  /** The hash of the file at `path`, or undefined when no file is there. */
  fileHash(path: string): string | undefined {
    const node = this.#get(path);
    return node?.kind === "f" ? node.hash : undefined;
  }

  #get(path: string): NodeRow | undefined {
    return this.sql.exec<NodeRow>("SELECT path, kind, hash, files, bytes FROM nodes WHERE path = ?", path).toArray()[0];
  }

  #children(dir: string): NodeRow[] {
    return this.sql
      .exec<NodeRow>("SELECT path, kind, hash, files, bytes FROM nodes WHERE parent = ? ORDER BY path", dir)
      .toArray();
  }

  /** Deletes a node and everything below it; '/' < '0' bounds the descendants as one index range. */
  #removeSubtree(path: string): void {
    this.sql.exec("DELETE FROM nodes WHERE path = ? OR (path >= ? AND path < ?)", path, `${path}/`, `${path}0`);
  }

  /** Makes every ancestor a directory, replacing a file that stands where a directory must go. */
  #ensureDirs(dir: string, known: Set<string>): void {
    if (known.has(dir)) return;
    this.#ensureDirs(parentOf(dir), known);
    const existing = this.#get(dir);
    if (existing?.kind !== "d") {
      if (existing) this.#removeSubtree(dir);
      this.sql.exec(
        "INSERT INTO nodes (path, parent, kind, hash, files, bytes) VALUES (?, ?, 'd', ?, 0, 0)",
        dir,
        parentOf(dir),
        EMPTY_ROOT,
      );
    }
    known.add(dir);
  }

  /** Deepest first, so a directory is hashed after all of its children; empty directories are pruned. */
  #recompute(dirty: Set<string>): void {
    const byDepth = new Map<number, Set<string>>();
    const add = (dir: string) => {
      const depth = dir === "" ? 0 : dir.split("/").length;
      let level = byDepth.get(depth);
      if (!level) byDepth.set(depth, (level = new Set()));
      level.add(dir);
    };
    dirty.forEach(add);
    const maxDepth = Math.max(0, ...byDepth.keys());
    for (let depth = maxDepth; depth >= 0; depth--) {
      for (const dir of byDepth.get(depth) ?? []) {
        const node = this.#get(dir);
        if (!node || node.kind !== "d") continue;
        const children = this.#children(dir);
        if (dir !== "" && children.length === 0) {
          this.sql.exec("DELETE FROM nodes WHERE path = ?", dir);
          add(parentOf(dir));
          continue;
        }
        const hash = dirHash(children.map((c) => ({ name: nameOf(c.path), kind: c.kind, hash: c.hash })));
        const files = children.reduce((n, c) => n + c.files, 0);
        const bytes = children.reduce((n, c) => n + c.bytes, 0);
        if (hash !== node.hash || files !== node.files || bytes !== node.bytes) {
          this.sql.exec("UPDATE nodes SET hash = ?, files = ?, bytes = ? WHERE path = ?", hash, files, bytes, dir);
          if (dir !== "") add(parentOf(dir));
        }
      }
    }
  }
}
