/**
 * A task-set task's archive from its URL, for a sandbox host that does not hold it (a host that
 * restarted, another host, or a container made for this one task): the task object fetches it
 * under the rules an agent task's archive is fetched under (`archive.ts`: https to a public host at
 * every redirect, one message however the fetch failed), checks its SHA-256 against the task set's,
 * and sends it to the host, which checks it again and caches it by that hash. Nothing is stored on
 * the way, so an object that dies between the fetch and the sandbox's creation simply fetches again
 * (or finds the host holding it) when the creation is retried.
 */
import { MAX_ARCHIVE_BYTES } from "../../protocol/envs/api.js";
import { ArchiveError, fetchArchive, UNUSABLE_ARCHIVE } from "./archive.js";
import { TaskNotReady } from "./result.js";
import { SandboxUnavailable, type SandboxClient } from "./sandbox-client.js";

/** How long one fetch of an archive (its redirects and its body) may take. */
export const ARCHIVE_FETCH_TIMEOUT_MS = 120_000;

/** The archive's bytes differ from the task set's: the task is not run on different files. */
export class ArchiveMismatch extends TaskNotReady {}

async function readCapped(body: ReadableStream<Uint8Array>, max: number): Promise<Uint8Array | undefined> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > max) {
      await body.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(chunk);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}

function hex(digest: ArrayBuffer): string {
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Fetches the archive at `url`, checks that its SHA-256 is `sha256`, and sends it to `sandbox`'s host.
 * Throws TaskNotReady for an archive that cannot be had or is not the task's (asking again will
 * not help), and SandboxUnavailable for a failure that may pass (the network, a 5xx, a busy host).
 */
export async function supplyArchive(
  sandbox: SandboxClient,
  sha256: string,
  url: string,
  allowedOrigins: readonly string[],
): Promise<void> {
  let archive: Uint8Array | undefined;
  try {
    const signal = AbortSignal.timeout(ARCHIVE_FETCH_TIMEOUT_MS);
    const response = await fetchArchive(url, allowedOrigins, signal);
    if (response.status >= 400 && response.status < 500) throw new ArchiveError(UNUSABLE_ARCHIVE);
    if (!response.ok || !response.body) {
      await response.body?.cancel();
      throw new Error(`answered ${response.status}`);
    }
    archive = await readCapped(response.body, MAX_ARCHIVE_BYTES);
  } catch (err) {
    if (err instanceof ArchiveError) throw new TaskNotReady(`The task's archive URL: ${err.message}`);
    // How it failed (refused, broken off, timed out) is not told: see archive.ts.
    throw new SandboxUnavailable("The task's archive could not be fetched from its URL now: try again.", null);
  }
  if (!archive)
    throw new ArchiveMismatch(
      `The archive at the task's URL is larger than ${MAX_ARCHIVE_BYTES} bytes, so it is not archive ${sha256}: the task was not run.`,
    );
  const got = hex(await crypto.subtle.digest("SHA-256", archive));
  if (got !== sha256)
    throw new ArchiveMismatch(
      `The archive at the task's URL does not match the task set: its SHA-256 is ${got}, the task set's is ${sha256}. ` +
        "The task was not run; publish the archive the set was pushed with (or push the set again).",
    );
  const answer = await sandbox.putArchive(sha256, archive);
  if (answer.status === 200 || answer.status === 201) return;
  const detail =
    (answer.body as { message?: string } | undefined)?.message ?? `The sandbox host answered ${answer.status}.`;
  if (answer.status === 400 || answer.status === 413)
    throw new TaskNotReady(`The sandbox host refused the task: ${detail}`);
  throw new SandboxUnavailable(detail, answer.status === 404 ? null : answer.status);
}
