/**
 * A task's code from an archive: a `.tar.gz` (or `.tar`) the task object fetches and streams into
 * the task's sandbox, as a git host serves a repository's tree (`https://github.com/o/r/archive/<ref>.tar.gz`,
 * GitLab's `…/-/archive/…`, or any URL). Nothing of it is stored: entries go from the response
 * straight to the sandbox host in batches. An archive whose first entry is a directory holding the
 * rest (as git hosts wrap a tree) is unpacked from inside it. Links, devices, paths that climb out or
 * that a task's tree cannot hold, and files too large for one upload are skipped and counted.
 *
 * Only https to a public host is fetched, at the first URL and at every redirect (`archive-url.ts`),
 * and every way a fetch can come to nothing ends in one message: which way it failed (refused,
 * broken off, 404, not a tar, empty) would tell a user what listens where on the edge's network.
 */
import { z } from "zod";
import { archiveUrlRefusal, UNUSABLE_ARCHIVE } from "../../protocol/agents/archive-url.js";
import type { UploadFilesRequest } from "../../protocol/agents/sandbox.js";
import { TreePath } from "../../protocol/agents/tools.js";
import { toBase64 } from "../../protocol/base64.js";
import { tarEntries } from "../../protocol/tar-entries.js";
import { ConfigError } from "../../workers/config.js";

export { UNUSABLE_ARCHIVE };

/** The archive cannot be used as it is: asking again will not help. */
export class ArchiveError extends Error {
  override readonly name = "ArchiveError";
}

/** Redirects followed at most; each one's target is checked like the first URL. */
const MAX_REDIRECTS = 5;

/**
 * `ALLOW_PRIVATE_ARCHIVE_ORIGINS`: origins (`http://127.0.0.1:8000`, comma-separated) the operator
 * lets archives come from though they are not public, for tests and local development. Unset,
 * none are: the safe default.
 */
const ArchiveSettings = z.object({
  ALLOW_PRIVATE_ARCHIVE_ORIGINS: z
    .string()
    .optional()
    .transform((text, ctx) => {
      const origins = (text ?? "").split(/[\s,]+/).filter(Boolean);
      for (const origin of origins) {
        if (URL.canParse(origin) && new URL(origin).origin === origin) continue;
        ctx.addIssue({
          code: "custom",
          message: "ALLOW_PRIVATE_ARCHIVE_ORIGINS lists origins, e.g. http://127.0.0.1:8000",
        });
        return z.NEVER;
      }
      return origins;
    }),
});

const parsedSettings = new WeakMap<object, string[]>();

/** The origins let through despite their host, parsed once per `env`; throws on a malformed setting. */
export function allowedArchiveOrigins(env: object): string[] {
  const cached = parsedSettings.get(env);
  if (cached) return cached;
  const result = ArchiveSettings.safeParse(env);
  if (!result.success) throw new ConfigError(result.error.issues.map((i) => i.message).join("; "));
  parsedSettings.set(env, result.data.ALLOW_PRIVATE_ARCHIVE_ORIGINS);
  return result.data.ALLOW_PRIVATE_ARCHIVE_ORIGINS;
}

/**
 * An error of the response's body (it broke off) or of an upload to the sandbox, carried past the
 * decoders as it is: not the archive's fault, so the task tries again.
 */
class Passed {
  constructor(readonly error: unknown) {}
}

export interface ArchiveLimits {
  /** Bytes of the response (compressed) read at most. */
  maxArchiveBytes: number;
  /** Files unpacked at most. */
  maxFiles: number;
  /** A file larger than this is skipped. */
  maxFileBytes: number;
}

export const ARCHIVE_LIMITS: ArchiveLimits = {
  maxArchiveBytes: 512 * 2 ** 20,
  maxFiles: 100_000,
  maxFileBytes: 10 * 2 ** 20,
};

export interface ArchiveReport {
  files: number;
  bytes: number;
  skipped: number;
  /** The first skipped entries' names and why. */
  skippedEntries: { path: string; reason: string }[];
}

type Upload = (files: UploadFilesRequest["files"]) => Promise<unknown>;

/** Files and bytes per request to the sandbox host (its bodies are JSON with base64 content). */
const BATCH_FILES = 2000;
const BATCH_BYTES = 8 * 2 ** 20;
const NAMED_SKIPS = 20;

/** The response's bytes, counted against `max`, ungzipped when they start with gzip's magic number. */
async function tarStream(body: ReadableStream<Uint8Array>, max: number): Promise<ReadableStream<Uint8Array>> {
  let seen = 0;
  const counted = body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        seen += chunk.byteLength;
        if (seen > max) throw new ArchiveError(`The archive is larger than ${max} bytes.`);
        out.enqueue(chunk);
      },
    }),
  );
  const reader = counted.getReader();
  const first = await reader.read();
  const head = first.value ?? new Uint8Array();
  const rest = new ReadableStream<Uint8Array>({
    start(out) {
      if (head.byteLength) out.enqueue(head);
      if (first.done) out.close();
    },
    async pull(out) {
      let next: ReadableStreamReadResult<Uint8Array>;
      try {
        next = await reader.read();
      } catch (err) {
        // The network, not the archive: passed on as it is, past the decoders (which see this object).
        throw err instanceof ArchiveError ? err : new Passed(err);
      }
      if (next.done) out.close();
      else out.enqueue(next.value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
  const gzip = head[0] === 0x1f && head[1] === 0x8b;
  return gzip
    ? rest.pipeThrough(new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>)
    : rest;
}

async function readAll(body: ReadableStream<Uint8Array>, size: number): Promise<Uint8Array> {
  const out = new Uint8Array(size);
  let at = 0;
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    out.set(chunk.subarray(0, Math.max(0, size - at)), at);
    at += chunk.byteLength;
  }
  return out;
}

/**
 * The archive's response, its redirects followed by hand: `fetch` would follow one to a host this
 * edge must not reach. A URL refused at any hop is an ArchiveError; anything else that fails (the
 * network, a 5xx) is thrown as it is, to be tried again.
 */
export async function fetchArchive(
  url: string,
  allowedOrigins: readonly string[],
  signal?: AbortSignal,
): Promise<Response> {
  let at = new URL(url);
  for (let hop = 0; ; hop++) {
    if (archiveUrlRefusal(at, allowedOrigins)) throw new ArchiveError(UNUSABLE_ARCHIVE);
    const response = await fetch(at, {
      redirect: "manual",
      headers: { "User-Agent": "sextant-agent-tasks" },
      ...(signal ? { signal } : {}),
    });
    const location = response.headers.get("Location");
    if (response.status < 300 || response.status >= 400 || location === null) return response;
    await response.body?.cancel();
    if (hop >= MAX_REDIRECTS || !URL.canParse(location, at.href)) throw new ArchiveError(UNUSABLE_ARCHIVE);
    at = new URL(location, at);
  }
}

/**
 * Fetches `url` and uploads its files with `upload`; throws ArchiveError for an archive that cannot
 * be used. `allowedOrigins` are let through though not public (`ALLOW_PRIVATE_ARCHIVE_ORIGINS`).
 */
export async function importArchive(
  url: string,
  upload: Upload,
  allowedOrigins: readonly string[] = [],
  limits = ARCHIVE_LIMITS,
): Promise<ArchiveReport> {
  const response = await fetchArchive(url, allowedOrigins);
  if (response.status >= 400 && response.status < 500) throw new ArchiveError(UNUSABLE_ARCHIVE);
  if (!response.ok || !response.body) throw new Error(`The archive's server answered ${response.status}.`);
  const report: ArchiveReport = { files: 0, bytes: 0, skipped: 0, skippedEntries: [] };
  const skip = (path: string, reason: string) => {
    report.skipped++;
    if (report.skippedEntries.length < NAMED_SKIPS) report.skippedEntries.push({ path, reason });
  };
  let batch: UploadFilesRequest["files"] = [];
  let batchBytes = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    const files = batch;
    batch = [];
    batchBytes = 0;
    try {
      await upload(files);
    } catch (err) {
      throw new Passed(err);
    }
  };
  let root: string | undefined;
  let first = true;
  const entries = tarEntries(await tarStream(response.body, limits.maxArchiveBytes));
  try {
    for await (const entry of entries) {
      const { header } = entry;
      const type = header.type ?? "file";
      let name = header.name.replace(/^\.\//, "");
      if (first && type === "directory" && name !== "" && /^[^/]+\/?$/.test(name)) root = name.replace(/\/?$/, "/");
      first = false;
      if (root !== undefined) {
        if (name.startsWith(root)) name = name.slice(root.length);
        else if (name !== root.slice(0, -1)) {
          await entry.body.cancel();
          skip(header.name, "outside the archive's top directory");
          continue;
        }
      }
      if (type !== "file") {
        await entry.body.cancel();
        if (type !== "directory") skip(header.name, type);
        continue;
      }
      if (!TreePath.safeParse(name).success || /[\u0000-\u001f\u007f\\]/.test(name)) {
        await entry.body.cancel();
        skip(header.name, "a path the task's tree cannot hold");
        continue;
      }
      if (header.size > limits.maxFileBytes) {
        await entry.body.cancel();
        skip(name, "too large");
        continue;
      }
      if (report.files >= limits.maxFiles)
        throw new ArchiveError(`The archive holds more than ${limits.maxFiles} files.`);
      const bytes = await readAll(entry.body, header.size);
      const content = toBase64(bytes);
      if (batch.length >= BATCH_FILES || batchBytes + content.length > BATCH_BYTES) await flush();
      batch.push({ path: name, content, executable: ((header.mode ?? 0o644) & 0o111) !== 0 });
      batchBytes += content.length;
      report.files++;
      report.bytes += bytes.byteLength;
    }
    await flush();
  } catch (err) {
    // Whatever the response or the sandbox threw is theirs; anything else the decoders threw, on the bytes.
    if (err instanceof Passed) throw err.error;
    if (err instanceof ArchiveError) throw err;
    throw new ArchiveError(UNUSABLE_ARCHIVE);
  }
  if (report.files === 0) throw new ArchiveError(UNUSABLE_ARCHIVE);
  return report;
}
