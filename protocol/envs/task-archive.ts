/**
 * A task archive: a gzip'd tar of a task directory, paths relative to the task root, named by the
 * SHA-256 of its bytes. Unpacked here into the files `readHarborTask` reads, with the care any
 * uploaded archive needs: only regular files and directories (a link, a device or a fifo refuses
 * the archive), no path that climbs out or that a tree cannot hold, no name twice, and caps on the
 * bytes unpacked, on each file and on the number of files, checked as the bytes come (a small
 * archive that inflates to gigabytes stops at the cap). Refusing, not skipping: a task missing a
 * test file it was sent with would score differently from what its author meant.
 *
 * Pure (web streams only): the client, the edge and the sandbox host read archives the same way.
 */
import { z } from "zod";
import { TreePath } from "../agents/tools.js";
import { tarEntries } from "../tar-entries.js";
import { TaskRefused } from "./harbor.js";

export const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "64 lowercase hex digits (a SHA-256)");

export const TASK_ARCHIVE_LIMITS = {
  /** The archive's bytes (gzip'd), as sent. */
  archiveBytes: 64 * 2 ** 20,
  /** Bytes of all its files, unpacked. */
  unpackedBytes: 256 * 2 ** 20,
  /** One file's bytes. */
  fileBytes: 64 * 2 ** 20,
  files: 10_000,
};
export type TaskArchiveLimits = typeof TASK_ARCHIVE_LIMITS;

const ARCHIVE = "the archive";

export interface UnpackedTask {
  files: Map<string, Uint8Array>;
  /** Paths whose mode has an executable bit. */
  executable: Set<string>;
}

/** The lowercase hex SHA-256 of bytes (WebCrypto: the same in Node and workerd). */
export async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Unpacks a gzip'd tar; throws TaskRefused (file "the archive" or the entry's name) for what it will not hold. */
export async function unpackTaskArchive(
  archive: Uint8Array,
  limits: TaskArchiveLimits = TASK_ARCHIVE_LIMITS,
): Promise<UnpackedTask> {
  if (archive.byteLength > limits.archiveBytes)
    throw new TaskRefused(ARCHIVE, undefined, `is over ${limits.archiveBytes} bytes`);
  if (archive[0] !== 0x1f || archive[1] !== 0x8b) throw new TaskRefused(ARCHIVE, undefined, "is not gzip'd");
  let unpacked = 0;
  const counted = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, out) {
      unpacked += chunk.byteLength;
      // The tar's own headers and padding count too: a cap on what inflating may produce at all.
      if (unpacked > limits.unpackedBytes + limits.files * 1024 + 1024 * 1024)
        throw new TaskRefused(ARCHIVE, undefined, `unpacks to over ${limits.unpackedBytes} bytes`);
      out.enqueue(chunk);
    },
  });
  const source = new ReadableStream<Uint8Array>({
    start(out) {
      out.enqueue(archive);
      out.close();
    },
  });
  const files = new Map<string, Uint8Array>();
  const executable = new Set<string>();
  const dirs = new Set<string>();
  let total = 0;
  const entries = tarEntries(
    source
      .pipeThrough(new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>)
      .pipeThrough(counted),
  );
  try {
    for await (const entry of entries) {
      const { header } = entry;
      const type = header.type ?? "file";
      const name = header.name.replace(/^(\.\/)+/, "").replace(/\/+$/, "");
      const refuse = (reason: string): never => {
        throw new TaskRefused(header.name.slice(0, 200), undefined, reason);
      };
      if (type === "directory") {
        await entry.body.cancel();
        if (name !== "" && name !== ".") dirs.add(name);
        continue;
      }
      if (type !== "file") refuse(`is a ${type}: a task archive holds only files and directories`);
      if (!TreePath.safeParse(name).success || /[\u0000-\u001f\u007f]/.test(name))
        refuse("is not a path inside the task");
      if (files.has(name) || dirs.has(name)) refuse("is in the archive twice");
      if (header.size > limits.fileBytes) refuse(`is over ${limits.fileBytes} bytes`);
      if (files.size >= limits.files) throw new TaskRefused(ARCHIVE, undefined, `holds over ${limits.files} files`);
      total += header.size;
      if (total > limits.unpackedBytes)
        throw new TaskRefused(ARCHIVE, undefined, `unpacks to over ${limits.unpackedBytes} bytes`);
      const bytes = new Uint8Array(header.size);
      let at = 0;
      for await (const chunk of entry.body as unknown as AsyncIterable<Uint8Array>) {
        if (at + chunk.byteLength > header.size) refuse("holds more bytes than its header says");
        bytes.set(chunk, at);
        at += chunk.byteLength;
      }
      files.set(name, bytes);
      if (((header.mode ?? 0o644) & 0o111) !== 0) executable.add(name);
    }
  } catch (err) {
    if (err instanceof TaskRefused) throw err;
    throw new TaskRefused(ARCHIVE, undefined, "is not a readable gzip'd tar");
  }
  // A file and a directory of one name, or a file under a file, cannot both be placed.
  for (const path of files.keys()) {
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++)
      if (files.has(parts.slice(0, i).join("/")))
        throw new TaskRefused(path, undefined, `is under ${parts.slice(0, i).join("/")}, which is a file`);
  }
  if (files.size === 0) throw new TaskRefused(ARCHIVE, undefined, "holds no files");
  return { files, executable };
}
