/**
 * The Merkle tree both sides compute. Names are the encrypted path segments, so the edge can
 * maintain and verify directory hashes without ever seeing a real name. Synchronous SHA-256
 * (@noble/hashes) because the edge recomputes hashes inside a synchronous storage transaction.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";

export type NodeKind = "f" | "d";

export interface ChildEntry {
  name: string;
  kind: NodeKind;
  hash: string;
}

const DIR_DOMAIN = "sextant-dir-v1\n";

/** Byte order on ASCII names: the same on every platform and in SQLite's BINARY collation. */
export const compareNames = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** Hash of a directory: its children sorted by name, each as kind, name and hash. */
export function dirHash(children: readonly ChildEntry[]): string {
  const sorted = [...children].sort((a, b) => compareNames(a.name, b.name));
  let text = DIR_DOMAIN;
  for (const child of sorted) text += `${child.kind} ${child.name} ${child.hash}\n`;
  return bytesToHex(sha256(utf8ToBytes(text)));
}

/** The root hash of an empty workspace. */
export const EMPTY_ROOT = dirHash([]);

export const parentOf = (path: string): string => {
  const slash = path.lastIndexOf("/");
  return slash < 0 ? "" : path.slice(0, slash);
};

export const nameOf = (path: string): string => path.slice(path.lastIndexOf("/") + 1);

export const depthOf = (path: string): number => (path === "" ? 0 : path.split("/").length);
