import { realpathSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { z } from "zod";
import { configDir, readJsonFile, writeSecretFile } from "../cli/credentials.js";
import { WorkspaceSecret } from "./secret.js";

/** A local directory bound to a workspace on an edge, with the secret that keeps it private. */
export const RegistryEntry = z.object({
  root: z.string(),
  baseURL: z.string(),
  workspaceId: z.string(),
  secret: z.string(),
});
export type RegistryEntry = z.infer<typeof RegistryEntry>;

const RegistryFile = z.object({ workspaces: z.array(RegistryEntry) });

export const registryPath = () => join(configDir(), "workspaces.json");

/** A workspace directory that does not exist or is not a directory: a mistake in how the CLI was called. */
export class NotADirectoryError extends Error {
  override name = "NotADirectoryError";
}

/** The canonical form of a directory: absolute, symlinks resolved. */
export function canonicalRoot(dir: string): string {
  let root: string;
  try {
    root = realpathSync(resolve(dir));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new NotADirectoryError(`${dir} does not exist.`);
    if (code === "ENOTDIR") throw new NotADirectoryError(`${dir} is not a directory.`);
    throw err;
  }
  if (!statSync(root).isDirectory()) throw new NotADirectoryError(`${dir} is not a directory.`);
  return root;
}

export async function readRegistry(): Promise<RegistryEntry[]> {
  return (await readJsonFile(registryPath(), RegistryFile))?.workspaces ?? [];
}

/** The entry for `dir` on `baseURL`: the directory itself or its nearest registered ancestor. */
export async function findEntry(dir: string, baseURL: string): Promise<RegistryEntry | undefined> {
  const entries = (await readRegistry()).filter((e) => e.baseURL === baseURL);
  for (let current = canonicalRoot(dir); ; current = dirname(current)) {
    const entry = entries.find((e) => e.root === current);
    if (entry) return entry;
    if (dirname(current) === current) return undefined;
  }
}

/** Adds or replaces the entry for a root on an edge; the file is owner-only. */
export async function saveEntry(entry: RegistryEntry): Promise<void> {
  WorkspaceSecret.parse(entry.secret);
  const others = (await readRegistry()).filter((e) => !(e.root === entry.root && e.baseURL === entry.baseURL));
  await writeSecretFile(registryPath(), { workspaces: [...others, entry] });
}

export async function removeEntry(entry: RegistryEntry): Promise<void> {
  const others = (await readRegistry()).filter((e) => !(e.root === entry.root && e.baseURL === entry.baseURL));
  await writeSecretFile(registryPath(), { workspaces: others });
}

/** `ws_…:sxs_…`: what `sextant key export` prints and `sextant key import` reads. */
export function exportToken(entry: RegistryEntry): string {
  return `${entry.workspaceId}:${entry.secret}`;
}

export function parseToken(token: string): { workspaceId: string; secret: WorkspaceSecret } {
  const match = token.trim().match(/^(ws_[0-9a-z]+):(sxs_[A-Za-z0-9_-]+)$/);
  if (!match) throw new Error("Not a workspace key: it looks like `ws_…:sxs_…`, as `sextant key export` prints it.");
  return { workspaceId: match[1]!, secret: WorkspaceSecret.parse(match[2]!) };
}
