/**
 * Running one turn's tool calls as concurrently as they allow: reads run together; a write waits for
 * every earlier call on its file (reads of it included) and for earlier reads that scan the tree; a
 * read of one file waits for earlier writes of that file, a read that scans the tree (grep, list_dir,
 * read_lints) for every earlier write; a command waits for every earlier call and holds every later
 * one (it can touch any file); `finish` waits for everything before it. Calls keep the model's order
 * wherever they conflict.
 */
import { toolNamed } from "../../protocol/agents/tools.js";

export interface PlannedCall {
  tool: string;
  args: unknown;
}

/** The one file a call reads or writes, when it names one (read_file and the writes). */
function fileOf(call: PlannedCall): string | undefined {
  if (call.tool !== "read_file" && toolNamed(call.tool)?.access !== "write") return undefined;
  const path = (call.args as { path?: unknown } | null)?.path;
  return typeof path === "string" ? path : undefined;
}

interface Scheduled {
  done: Promise<unknown>;
  access: "read" | "write" | "exec" | "finish";
  file: string | undefined;
}

function conflicts(earlier: Scheduled, later: Scheduled): boolean {
  if (earlier.access === "exec" || earlier.access === "finish") return true;
  if (later.access === "exec" || later.access === "finish") return true;
  if (earlier.access === "read" && later.access === "read") return false;
  // One of the two writes: they conflict on the same file, or when either one is not about one file.
  return earlier.file === undefined || later.file === undefined || earlier.file === later.file;
}

/**
 * Runs `run(call, i)` for every call, each once the earlier calls it conflicts with have settled;
 * resolves with the outcomes in the calls' order. A call's failure does not stop the others.
 */
export async function runConcurrently<T>(
  calls: readonly PlannedCall[],
  run: (call: PlannedCall, index: number) => Promise<T>,
): Promise<PromiseSettledResult<T>[]> {
  const scheduled: Scheduled[] = [];
  const settled = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      () => undefined,
    );
  calls.forEach((call, i) => {
    const me: Omit<Scheduled, "done"> = { access: toolNamed(call.tool)?.access ?? "read", file: fileOf(call) };
    const before = scheduled
      .filter((s) => conflicts(s, { ...me, done: Promise.resolve() }))
      .map((s) => settled(s.done));
    scheduled.push({ ...me, done: Promise.all(before).then(() => run(call, i)) });
  });
  return Promise.allSettled(scheduled.map((s) => s.done as Promise<T>));
}
