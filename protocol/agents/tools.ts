/**
 * The coding agent's tools, as data: each one's name, what the model is told about it, its
 * arguments (a zod schema, sent to the model as JSON Schema) and how it may overlap with other calls.
 * The task object offers them to the model, checks every call against them, and the sandbox host
 * runs them; nothing else defines a tool.
 */
import { z } from "zod";
import { CodebaseSearchArgs as SearchArgs, codebaseSearchDescription } from "../search-tool.js";

/** A path inside the task's tree: relative, `/`-separated, no `..`, no NUL. */
export const TreePath = z
  .string()
  .min(1)
  .max(1024)
  .refine(
    (p) =>
      !p.startsWith("/") &&
      !p.includes("\0") &&
      !p.includes("\\") &&
      p.split("/").every((part) => part !== ".." && part !== ""),
    "must be a relative path inside the task's tree, without `..`",
  );

const optionalDir = TreePath.or(z.literal(".")).optional();

/**
 * How a call may run beside others: `read` calls run together; a `write` waits for every earlier
 * call on its path; `exec` (a command can touch any file) waits for everything before it and holds
 * everything after it; `finish` ends the task once the calls before it are done.
 */
export type ToolAccess = "read" | "write" | "exec" | "finish";

export interface ToolDefinition<A extends z.ZodType = z.ZodType> {
  name: string;
  description: string;
  args: A;
  access: ToolAccess;
}

const tool = <A extends z.ZodType>(def: ToolDefinition<A>) => def;

export const ReadFileArgs = z.strictObject({
  path: TreePath,
  /** 1-based, inclusive. */
  startLine: z.number().int().min(1).optional(),
  endLine: z.number().int().min(1).optional(),
});
export const ListDirArgs = z.strictObject({
  path: optionalDir,
  /** How many levels below `path` to list (1 = its entries only). */
  depth: z.number().int().min(1).max(6).default(2),
});
export const GrepArgs = z.strictObject({
  /** A JavaScript regular expression. */
  pattern: z.string().min(1).max(1000),
  path: optionalDir,
  ignoreCase: z.boolean().default(false),
  maxResults: z.number().int().min(1).max(500).default(100),
});
export const EditFileArgs = z.strictObject({
  path: TreePath,
  /** Text that occurs exactly once in the file. */
  oldText: z.string().min(1).max(200_000),
  newText: z.string().max(200_000),
  /** `hash` from read_file: the edit is refused if the file changed since. */
  expectedHash: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
export const CreateFileArgs = z.strictObject({ path: TreePath, content: z.string().max(1_000_000) });
export const DeleteFileArgs = z.strictObject({ path: TreePath });
export const RunTerminalArgs = z.strictObject({
  command: z.string().min(1).max(10_000),
  /** Killed past this; capped by the task's limits. */
  timeoutMs: z.number().int().min(100).max(600_000).default(60_000),
});
export const ReadLintsArgs = z.strictObject({
  paths: z.array(TreePath).max(100).optional(),
  /** Killed past this; capped by the task's limits. */
  timeoutMs: z.number().int().min(100).max(600_000).optional(),
});
/** `sextant mcp`'s codebase_search arguments; `path` is a directory of the task's tree. */
export const CodebaseSearchArgs = z.strictObject(SearchArgs.shape);
export const FinishArgs = z.strictObject({ summary: z.string().min(1).max(10_000) });

export const AGENT_TOOLS = [
  tool({
    name: "read_file",
    description:
      "Read a file of the task's tree (or a line range of it). Returns its text, line count and `hash` (SHA-256), which edit_file can check.",
    args: ReadFileArgs,
    access: "read",
  }),
  tool({
    name: "list_dir",
    description: "List a directory of the task's tree, `depth` levels deep. Directories end with `/`.",
    args: ListDirArgs,
    access: "read",
  }),
  tool({
    name: "grep",
    description: "Search the task's files for a regular expression; returns path, line number and line of each match.",
    args: GrepArgs,
    access: "read",
  }),
  tool({
    name: "codebase_search",
    description: codebaseSearchDescription("the task's code, in Sextant's index of the workspace it came from"),
    args: CodebaseSearchArgs,
    access: "read",
  }),
  tool({
    name: "edit_file",
    description:
      "Replace `oldText`, which must occur exactly once in the file, with `newText`. Pass read_file's `hash` as `expectedHash` to refuse the edit if the file changed since.",
    args: EditFileArgs,
    access: "write",
  }),
  tool({
    name: "create_file",
    description: "Create a new file (and its directories). Fails if the file exists.",
    args: CreateFileArgs,
    access: "write",
  }),
  tool({ name: "delete_file", description: "Delete a file.", args: DeleteFileArgs, access: "write" }),
  tool({
    name: "run_terminal",
    description:
      "Run a shell command in the task's tree, in a sandbox without network. Returns exit code and output (capped); killed past `timeoutMs`.",
    args: RunTerminalArgs,
    access: "exec",
  }),
  tool({
    name: "read_lints",
    description:
      "Run the project's own type checker and linters (found from its configuration) and return their diagnostics.",
    args: ReadLintsArgs,
    access: "read",
  }),
  tool({
    name: "finish",
    description: "End the task, with a summary of what was changed and why.",
    args: FinishArgs,
    access: "finish",
  }),
] as const;

export type AgentToolName = (typeof AGENT_TOOLS)[number]["name"];
export const AGENT_TOOL_NAMES = AGENT_TOOLS.map((t) => t.name) as AgentToolName[];
export const toolNamed = (name: string): ToolDefinition | undefined => AGENT_TOOLS.find((t) => t.name === name);

/**
 * The tools as OpenAI-compatible chat `tools`: what the model is offered. codebase_search only to a
 * task whose code came with its index (`searchable`).
 */
export function openAiTools(options: { searchable: boolean }): OpenAiTool[] {
  // Made once: converting the schemas took a tenth of a task object's CPU when it was done every turn.
  let tools = openAiToolsMade.get(options.searchable);
  if (!tools) {
    tools = AGENT_TOOLS.filter((t) => options.searchable || t.name !== "codebase_search").map((t) => ({
      type: "function" as const,
      function: {
        name: t.name,
        description: t.description,
        parameters: z.toJSONSchema(t.args, { io: "input", target: "draft-7" }) as object,
      },
    }));
    openAiToolsMade.set(options.searchable, tools);
  }
  return tools;
}

type OpenAiTool = { type: "function"; function: { name: string; description: string; parameters: object } };
const openAiToolsMade = new Map<boolean, OpenAiTool[]>();

/** The path a write call touches (for ordering), or undefined. */
export function writePath(name: string, args: unknown): string | undefined {
  const def = toolNamed(name);
  if (def?.access !== "write") return undefined;
  const path = (args as { path?: unknown } | null)?.path;
  return typeof path === "string" ? path : undefined;
}

/** codebase_search's answer for a task whose code came without an index. */
export const NOT_INDEXED = {
  code: "not_indexed",
  message: "This task's code came without an index: use grep and list_dir instead.",
} as const;

/** What a tool answered: its result as JSON, or an error the model reads and can act on. */
export const ToolOutcome = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), result: z.unknown() }),
  z.object({ ok: z.literal(false), error: z.object({ code: z.string(), message: z.string() }) }),
]);
export type ToolOutcome = z.infer<typeof ToolOutcome>;
