/**
 * A tar stream's entries, read one at a time as they arrive, for the two readers of task archives: a
 * task set's archive as the client, the edge and the sandbox host unpack it (`envs/task-archive.ts`),
 * and a task's code as its object streams it into the sandbox.
 */
import { createTarDecoder } from "modern-tar";

export interface TarEntry {
  header: { name: string; size: number; type?: string; mode?: number };
  /** Read or cancelled before the next entry comes. */
  body: ReadableStream<Uint8Array>;
}

/** The entries of an uncompressed tar stream. */
export function tarEntries(tar: ReadableStream<Uint8Array>): AsyncIterable<TarEntry> {
  // Both runtimes' streams are async-iterable; not every lib this compiles against declares it.
  return tar.pipeThrough(createTarDecoder()) as unknown as AsyncIterable<TarEntry>;
}
