/**
 * The Workers runtime's own word that a Worker's code crossed or outlived its request: a request (or
 * Durable Object) that awaits I/O another one started, or one left waiting on a promise nobody will
 * settle. Tests can pass while it happens (the request that notices gets a 500 or is cancelled, and a
 * retry hides it), so `npm test` reads every edge's log for these messages instead.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";

export const RUNTIME_FAULTS = [
  "Cannot perform I/O on behalf of a different request",
  "Cannot perform I/O on behalf of a different Durable Object",
  "The Workers runtime canceled this request because it detected that your Worker's code had hung",
  // workerd's warning when one request settles a promise another awaits: the first sign of the above.
  "A promise was resolved or rejected from a different request context",
] as const;

/** Where each local edge a test starts keeps a copy of its output, relative to the checkout. */
export const EDGE_LOG_DIR = ".vitest/edge-logs";

export interface RuntimeFault {
  file: string;
  /** 1-based. */
  line: number;
  text: string;
}

export function isRuntimeFault(line: string): boolean {
  return RUNTIME_FAULTS.some((message) => line.includes(message));
}

/** Every line of the logs that carries a runtime fault, read a line at a time: a log can outgrow one string. */
export async function scanRuntimeLogFiles(files: string[]): Promise<RuntimeFault[]> {
  const faults: RuntimeFault[] = [];
  for (const file of files) {
    let line = 0;
    for await (const text of createInterface({ input: createReadStream(file), crlfDelay: Infinity })) {
      line++;
      if (isRuntimeFault(text)) faults.push({ file, line, text });
    }
  }
  return faults;
}
