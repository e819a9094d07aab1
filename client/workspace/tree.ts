import { compareNames, dirHash, nameOf, parentOf, type ChildEntry, type NodeKind } from "../../protocol/merkle.js";
import type { FileTable } from "./file-table.js";
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

/** What the previous build left behind, so that only directories on a changed path are rehashed. */
export interface TreeCache {
  files: FileTable;
  dirHashes: ReadonlyMap<string, string>;
}

// Plain and encrypted paths split the same way.
const parentOfPlain = parentOf;
const nameOfPlain = nameOf;

/**
 * The client's Merkle tree over encrypted names; it hashes exactly as the edge does, so equal
 * roots mean equal trees. Built incrementally: a directory is rehashed only when a file below it
 * was added, changed or removed since the cached build.
 */
export class LocalTree {
  readonly root: string;
  /** Plain directory path -> hash, for every directory that holds at least one file. */
  readonly dirHashes: Map<string, string> = new Map();
  #encrypted: Map<string, LocalNode> | undefined;

  constructor(
    readonly files: FileTable,
    private readonly secret: WorkspaceSecret,
    cache?: TreeCache,
  ) {
    const dirty = new Set<string>();
    const touch = (path: string) => {
      for (let dir = parentOfPlain(path); !dirty.has(dir); dir = parentOfPlain(dir)) {
        dirty.add(dir);
        if (dir === "") break;
      }
    };
    if (cache?.dirHashes.has("") && cache.files.sameFiles(files)) {
      this.dirHashes = new Map(cache.dirHashes);
      this.root = this.dirHashes.get("")!;
      return;
    }
    if (cache?.dirHashes.has("")) {
      const paths = files.paths;
      for (let row = 0; row < paths.length; row++)
        if (!cache.files.sameHash(paths[row]!, files, row)) touch(paths[row]!);
      for (const path of cache.files.keys()) if (!files.has(path)) touch(path);
      if (dirty.size === 0) {
        // Nothing below any directory changed: the cached hashes are this tree's hashes.
        this.dirHashes = new Map(cache.dirHashes);
        this.root = this.dirHashes.get("")!;
        return;
      }
    }

    // Directory -> its files and subdirectories, built in one pass; parents stop at the first known one.
    const dirs = new Map<string, { files: number[]; dirs: string[] }>([["", { files: [], dirs: [] }]]);
    files.paths.forEach((path, row) => {
      let child = path;
      let parent = parentOfPlain(path);
      let entry = dirs.get(parent);
      entry ? entry.files.push(row) : dirs.set(parent, { files: [row], dirs: [] });
      while (!entry && parent !== "") {
        child = parent;
        parent = parentOfPlain(parent);
        entry = dirs.get(parent);
        entry ? entry.dirs.push(child) : dirs.set(parent, { files: [], dirs: [child] });
      }
    });

    const depth = (dir: string) => (dir === "" ? 0 : dir.split("/").length);
    const reusable = (dir: string) => cache !== undefined && !dirty.has(dir) && cache.dirHashes.has(dir);
    const order = [...dirs.keys()].filter((dir) => !reusable(dir));
    order.sort((a, b) => depth(b) - depth(a));
    for (const dir of dirs.keys()) if (reusable(dir)) this.dirHashes.set(dir, cache!.dirHashes.get(dir)!);
    for (const dir of order) {
      const { files: fileRows, dirs: dirChildren } = dirs.get(dir)!;
      const children: ChildEntry[] = [];
      for (const row of fileRows) {
        children.push({
          name: secret.encryptSegment(nameOfPlain(files.paths[row]!)),
          kind: "f",
          hash: files.hashAt(row),
        });
      }
      for (const path of dirChildren) {
        children.push({ name: secret.encryptSegment(nameOfPlain(path)), kind: "d", hash: this.dirHashes.get(path)! });
      }
      this.dirHashes.set(dir, dirHash(children));
    }
    this.root = this.dirHashes.get("")!;
  }

  /** The tree keyed by encrypted path, built on first use: only a descent needs it. */
  get nodes(): Map<string, LocalNode> {
    if (this.#encrypted) return this.#encrypted;
    const nodes = new Map<string, LocalNode>();
    const encryptedDir = new Map<string, string>([["", ""]]);
    const encDir = (plain: string): string => {
      let enc = encryptedDir.get(plain);
      if (enc === undefined) {
        const parent = encDir(parentOfPlain(plain));
        enc = join(parent, this.secret.encryptSegment(nameOfPlain(plain)));
        encryptedDir.set(plain, enc);
      }
      return enc;
    };
    const children = new Map<string, string[]>();
    const addChild = (parentEnc: string, name: string) => {
      const list = children.get(parentEnc);
      list ? list.push(name) : children.set(parentEnc, [name]);
    };
    for (const [dir, hash] of this.dirHashes) {
      const enc = encDir(dir);
      nodes.set(enc, { kind: "d", hash, path: dir, size: 0 });
      if (dir !== "") addChild(encDir(parentOfPlain(dir)), this.secret.encryptSegment(nameOfPlain(dir)));
    }
    this.files.paths.forEach((path, row) => {
      const name = this.secret.encryptSegment(nameOfPlain(path));
      const parent = encDir(parentOfPlain(path));
      nodes.set(join(parent, name), { kind: "f", hash: this.files.hashAt(row), path, size: this.files.meta[row * 3]! });
      addChild(parent, name);
    });
    for (const [enc, list] of children) nodes.get(enc)!.children = list.sort(compareNames);
    return (this.#encrypted = nodes);
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
