/**
 * Fills an agent task's tree from a local directory with what `sextant index` would send: the same
 * walk and ignore rules (`.gitignore`, `.sextantignore`, the default excludes), and every secret
 * replaced as the index replaces it. Binary files travel as they are; names the task's tree cannot
 * hold, or that do not read back, are skipped and named, never fatal.
 */
import { lstat, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { looksBinary } from "../../protocol/binary.js";
import type { UploadTaskFilesRequest } from "../../protocol/agents/task.js";
import { TreePath } from "../../protocol/agents/tools.js";
import { findSecrets, redact } from "../index/secrets.js";
import type { Sextant } from "../sdk/client.js";
import { noSkips, scanWorkspace, type SkipReason } from "../workspace/scanner.js";
import { WorkspaceSecret } from "../workspace/secret.js";
import { DEFAULT_MAX_BODY_BYTES } from "../workspace/sync.js";

export type UploadSkipReason = Exclude<SkipReason, "binary" | "generated"> | "hostileName";

export const UPLOAD_SKIP_REASONS: Record<UploadSkipReason, string> = {
  tooLarge: "too large for one request",
  pathTooLong: "path too long or too deep",
  symlink: "symlink",
  special: "not a regular file",
  badName: "name not UTF-8",
  hostileName: "control character or backslash in name",
  unreadable: "unreadable",
  vanished: "vanished",
};

export interface WorkspaceUploadOptions {
  /** The edge's `MAX_BODY_BYTES`; every request stays under it. Default 1 MiB, the edge's default. */
  maxBodyBytes?: number;
  onProgress?: (event: { done: number; total: number; bytes: number }) => void;
  signal?: AbortSignal;
}

export interface WorkspaceUploadReport {
  files: number;
  /** Bytes of the files as uploaded (after redaction). */
  bytes: number;
  requests: number;
  /** Secrets replaced before upload, and how many files held them: counted, never shown. */
  secretsWithheld: number;
  filesWithSecrets: number;
  skipped: Record<UploadSkipReason, number>;
  skippedFiles: { path: string; reason: UploadSkipReason }[];
}

type Entry = UploadTaskFilesRequest["files"][number];

/** The most files `UploadTaskFilesRequest` takes in one request. */
const MAX_UPLOAD_FILES = 2000;
const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), "utf8");
/** `{"files":[]}`: what a request holds besides its entries. */
const ENVELOPE = jsonBytes({ files: [] });
/** C0 and C1 controls: a name holding one would print as something else, or break a line-based tool. */
const HOSTILE_NAME = /[\u0000-\u001f\u007f-\u009f\\]/;

/**
 * Uploads `dir` into task `id` (which must be `uploading`), in requests of at most 2,000 files each
 * under `maxBodyBytes`, one in flight while the next is read.
 */
export async function uploadWorkspace(
  sextant: Sextant,
  id: string,
  dir: string,
  options: WorkspaceUploadOptions = {},
): Promise<WorkspaceUploadReport> {
  const root = resolve(dir);
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  // A file's base64 is 4/3 its size; anything larger could not fit even alone in one request.
  const scan = await scanWorkspace(root, WorkspaceSecret.generate(), {
    includeGenerated: true,
    maxFileBytes: Math.floor(((maxBody - ENVELOPE) * 3) / 4),
  });
  const report: WorkspaceUploadReport = {
    files: 0,
    bytes: 0,
    requests: 0,
    secretsWithheld: 0,
    filesWithSecrets: 0,
    skipped: { ...withoutIndexOnly(noSkips()), hostileName: 0 },
    skippedFiles: [],
  };
  const skip = (path: string, reason: UploadSkipReason) => {
    report.skipped[reason]++;
    report.skippedFiles.push({ path, reason });
  };
  // The index leaves binary files out (they have nothing to search); a task's tree needs them.
  const paths = [...scan.files.paths];
  for (const skipped of scan.skippedFiles) {
    if (skipped.reason === "binary") paths.push(skipped.path);
    else if (skipped.reason !== "generated") skip(skipped.path, skipped.reason);
  }

  let batch: Entry[] = [];
  let batchBytes = ENVELOPE;
  let inFlight: Promise<void> = Promise.resolve();
  const flush = async () => {
    if (batch.length === 0) return;
    const files = batch;
    batch = [];
    batchBytes = ENVELOPE;
    await inFlight;
    inFlight = sextant.agents
      .uploadFiles(id, files, options.signal ? { signal: options.signal } : {})
      .then(() => void report.requests++);
    // Surfaces a failed request at the next flush at the latest, without an unhandled rejection.
    inFlight.catch(() => undefined);
  };

  let done = 0;
  for (const path of paths) {
    options.signal?.throwIfAborted();
    const entry = HOSTILE_NAME.test(path) || !TreePath.safeParse(path).success ? "hostileName" : await read(root, path);
    done++;
    if (typeof entry === "string") {
      skip(path, entry);
    } else {
      const size = jsonBytes(entry.file) + 1;
      if (ENVELOPE + size > maxBody) {
        skip(path, "tooLarge");
      } else {
        if (batchBytes + size > maxBody || batch.length >= MAX_UPLOAD_FILES) await flush();
        batch.push(entry.file);
        batchBytes += size;
        report.files++;
        report.bytes += entry.bytes;
        report.secretsWithheld += entry.secrets;
        if (entry.secrets > 0) report.filesWithSecrets++;
      }
    }
    options.onProgress?.({ done, total: paths.length, bytes: report.bytes });
  }
  await flush();
  await inFlight;
  return report;
}

/** Drops the reasons an upload never reports (binary files go up; generated ones are included). */
function withoutIndexOnly(
  skips: Record<SkipReason, number>,
): Record<Exclude<SkipReason, "binary" | "generated">, number> {
  const { binary: _binary, generated: _generated, ...rest } = skips;
  return rest;
}

/** One file as it is uploaded: a text file's secrets redacted exactly as `prepareUpload` does for the index. */
async function read(
  root: string,
  path: string,
): Promise<{ file: Entry; bytes: number; secrets: number } | UploadSkipReason> {
  const absolute = join(root, path);
  let content: Buffer;
  let mode: number;
  try {
    const stats = await lstat(absolute);
    if (!stats.isFile()) return stats.isSymbolicLink() ? "symlink" : "special";
    mode = stats.mode;
    content = await readFile(absolute);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT" ? "vanished" : "unreadable";
  }
  let secrets = 0;
  if (!looksBinary(content)) {
    const text = content.toString("utf8");
    const found = await findSecrets(path, text);
    if (found.length > 0) {
      content = Buffer.from(redact(text, found), "utf8");
      secrets = found.length;
    }
  }
  return {
    file: { path, content: content.toString("base64"), executable: (mode & 0o111) !== 0 },
    bytes: content.length,
    secrets,
  };
}
