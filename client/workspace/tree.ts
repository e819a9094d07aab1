import { compareNames, dirHash, nameOf, parentOf, type ChildEntry, type NodeKind } from "../../protocol/merkle.js";
import type { WorkspaceSecret } from "./secret.js";

export interface LocalNode {
  kind: NodeKind;
  hash: string;
  /** Plaintext workspace-relative path; never sent. */
  path: string;
  size: number;
  /** Encrypted names of the children, for directories. */
  children?: string[];
}

/**
 * The client's Merkle tree over encrypted names, keyed by encrypted path; it hashes exactly as the
 * edge does, so equal roots mean equal trees.
 */
export class LocalTree {
  readonly nodes = new Map<string, LocalNode>();
  readonly root: string;

  constructor(files: ReadonlyMap<string, { hash: string; size: number }>, secret: WorkspaceSecret) {
    const dirs = new Map<string, { path: string; children: ChildEntry[] }>([["", { path: "", children: [] }]]);
    const ensureDir = (encrypted: string, plain: string): ChildEntry[] => {
      const existing = dirs.get(encrypted);
      if (existing) return existing.children;
      const children: ChildEntry[] = [];
      dirs.set(encrypted, { path: plain, children });
      ensureDir(parentOf(encrypted), parentOf(plain)).push({ name: nameOf(encrypted), kind: "d", hash: "" });
      return children;
    };
    for (const [path, file] of files) {
      const encrypted = secret.encryptPath(path);
      this.nodes.set(encrypted, { kind: "f", hash: file.hash, path, size: file.size });
      ensureDir(parentOf(encrypted), parentOf(path)).push({ name: nameOf(encrypted), kind: "f", hash: file.hash });
    }
    const ordered = [...dirs.keys()].sort((a, b) => depth(b) - depth(a));
    for (const encrypted of ordered) {
      const dir = dirs.get(encrypted)!;
      for (const child of dir.children) {
        if (child.kind === "d") child.hash = this.nodes.get(join(encrypted, child.name))!.hash;
      }
      dir.children.sort((a, b) => compareNames(a.name, b.name));
      this.nodes.set(encrypted, {
        kind: "d",
        hash: dirHash(dir.children),
        path: dir.path,
        size: 0,
        children: dir.children.map((c) => c.name),
      });
    }
    this.root = this.nodes.get("")!.hash;
  }

  get(encrypted: string): LocalNode | undefined {
    return this.nodes.get(encrypted);
  }

  /** Every file at or under `encrypted`. */
  *filesUnder(encrypted: string): Generator<[string, LocalNode]> {
    const node = this.nodes.get(encrypted);
    if (!node) return;
    if (node.kind === "f") {
      yield [encrypted, node];
      return;
    }
    for (const child of node.children ?? []) yield* this.filesUnder(join(encrypted, child));
  }
}

export const join = (dir: string, name: string) => (dir === "" ? name : `${dir}/${name}`);
const depth = (path: string) => (path === "" ? 0 : path.split("/").length);
