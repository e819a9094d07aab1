import { chmod, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import envPaths from "env-paths";
import { z } from "zod";

/** Where the CLI keeps its files: `SEXTANT_CONFIG_DIR`, else the platform's per-user config directory. */
export function configDir(): string {
  return process.env.SEXTANT_CONFIG_DIR || envPaths("sextant", { suffix: "" }).config;
}

/** Written by `sextant login`: the edge and key a user chose. */
export const Credentials = z.object({ baseURL: z.url(), apiKey: z.string() });
export type Credentials = z.infer<typeof Credentials>;

/** Written by `npm start`: the local edge, its development key and its admin secret. */
export const LocalEdge = z.object({ baseURL: z.url(), apiKey: z.string(), adminSecret: z.string() });
export type LocalEdge = z.infer<typeof LocalEdge>;

export const credentialsPath = () => join(configDir(), "credentials.json");
export const localEdgePath = () => join(configDir(), "local-edge.json");
/**
 * Every local edge's own file, by its address: the one `local-edge.json` names is the CLI's
 * default; another edge started beside it is found here when `SEXTANT_BASE_URL` names it.
 */
export const localEdgePathFor = (baseURL: string) =>
  join(configDir(), "local-edges", `${new URL(baseURL).host.replace(/[^A-Za-z0-9.-]/g, "_")}.json`);

/** Reads a JSON file through its schema; a missing, unreadable or foreign file reads as absent. */
export async function readJsonFile<T>(path: string, schema: z.ZodType<T>): Promise<T | undefined> {
  try {
    const parsed = schema.safeParse(JSON.parse(await readFile(path, "utf8")));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** Owner-only and atomic: a crash mid-write never leaves a half-written secret behind. */
export async function writeSecretFile(path: string, value: unknown): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(value, null, 2) + "\n", { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, path);
}

/** Removes a file if it is there; says whether it was. */
export async function removeFile(path: string): Promise<boolean> {
  try {
    await rm(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}
