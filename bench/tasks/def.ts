/**
 * A task definition (`bench/tasks/defs/<id>.json`): which pinned source package, which function it
 * breaks and how, the issue-style statement an agent is given, and the package's own test command
 * that verifies it. The build (`build.ts`) reads these, fetches the source, applies the mutation and
 * writes a Harbor task directory (`write.ts`).
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { TreePath } from "../../protocol/agents/tools.js";

export const DEFS_DIR = join(import.meta.dirname, "defs");

/** A def's file, test path or node_modules package path, as the task's tree holds it. */
const Path = TreePath.refine((p) => !p.split("/").includes("."), "must not hold `.` segments");

/** A test path may name a directory with a trailing `/`, as the spec's examples do. */
const TestPath = z
  .string()
  .transform((p) => p.replace(/\/+$/, ""))
  .pipe(Path);

const Edit = z
  .object({
    file: Path,
    /** Exact text that occurs exactly once in the file. */
    before: z.string().min(1),
    after: z.string(),
  })
  .strict()
  .refine((e) => e.before !== e.after, "before and after are the same text");

const Edits = z.array(Edit).min(1);

const Mutation = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("recorded"), edits: Edits }).strict(),
  z
    .object({
      kind: z.literal("reverted-fix"),
      edits: Edits,
      /** Where the fix is recorded upstream (the version and changelog line). */
      upstream: z.string().min(1),
    })
    .strict(),
]);

/** An exact npm version (no ranges): runners are pinned as the source is. */
const ExactVersion = z.string().regex(/^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/, "must be an exact version");
const NpmName = z.string().regex(/^(?:@[a-z0-9][a-z0-9._-]*\/)?[a-z0-9][a-z0-9._-]*$/, "must be an npm package name");

export const TaskDef = z
  .object({
    id: z.string().regex(/^[a-z0-9][a-z0-9-]*[a-z0-9]$/, "must be lowercase <package>-<short-slug>"),
    split: z.enum(["train", "heldout"]),
    source: z
      .object({
        ecosystem: z.enum(["npm", "debian"]),
        package: z.string().min(1),
        version: z.string().min(1),
        /** SHA-256 of the downloaded npm tarball, or of the Debian orig tarball. */
        sha256: z.string().regex(/^[0-9a-f]{64}$/, "must be a lowercase hex SHA-256"),
      })
      .strict(),
    language: z.enum(["javascript", "typescript", "python"]),
    mutation: Mutation,
    statement: z.string().trim().min(40, "is too short to describe a failure"),
    test: z
      .object({
        /** Run in the tree's root with bash; `node --test …` and `pytest …`/`python3 -m pytest …` are recognised. */
        command: z.string().trim().min(1),
        /** The package's own test files and folders: restored pristine before every verify. */
        files: z.array(TestPath).min(1),
        timeoutSec: z.number().int().positive().max(1800),
        /** Packages placed in the tree's node_modules at build time (a runner and what it needs), pinned. */
        runner: z
          .object({ npm: z.record(NpmName, ExactVersion) })
          .strict()
          .optional(),
      })
      .strict(),
    note: z.string().min(1),
  })
  .strict();
export type TaskDef = z.infer<typeof TaskDef>;

/** A def the build will not turn into a task: the reason is printed as the task's skip line. */
export class DefRefused extends Error {
  override readonly name = "DefRefused";
}

export interface LoadedDef {
  file: string;
  id: string;
  def?: TaskDef;
  /** Why the file is not a usable def (it is then skipped, with this reason). */
  error?: string;
}

/** Every `*.json` in `dir`, parsed and validated; a bad one comes back with its error, not thrown. */
export function readDefs(dir = DEFS_DIR): LoadedDef[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith(".json"));
  } catch {
    return [];
  }
  return names.sort().map((name) => {
    const file = join(dir, name);
    const id = name.slice(0, -".json".length);
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(file, "utf8"));
    } catch (err) {
      return { file, id, error: `not JSON (${(err as Error).message})` };
    }
    const parsed = TaskDef.safeParse(json);
    if (!parsed.success) return { file, id, error: z.prettifyError(parsed.error).replace(/\s*\n\s*/g, "; ") };
    if (parsed.data.id !== id) return { file, id, error: `its id is ${parsed.data.id}, not its file's name` };
    return { file, id, def: parsed.data };
  });
}

/**
 * The def's edits applied to one file's text. Each `before` must occur exactly once in the text as
 * the earlier edits left it: a def that names text twice would break a place nobody chose.
 */
export function applyEdits(file: string, text: string, edits: TaskDef["mutation"]["edits"]): string {
  let out = text;
  for (const edit of edits) {
    if (edit.file !== file) continue;
    const at = out.indexOf(edit.before);
    if (at < 0) throw new DefRefused(`${file}: the edit's "before" text is not in the file`);
    if (out.indexOf(edit.before, at + 1) >= 0)
      throw new DefRefused(`${file}: the edit's "before" text occurs more than once in the file`);
    out = out.slice(0, at) + edit.after + out.slice(at + edit.before.length);
  }
  return out;
}

/** Whether `path` is `root` or lies under it (tree paths). */
export const within = (path: string, root: string) => path === root || path.startsWith(`${root}/`);
