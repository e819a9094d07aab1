/**
 * Environments (`/v1/envs/...`): task archives and task sets. An archive is a task directory's
 * gzip'd tar named by its SHA-256 (`sextant envs push` makes them, deterministically); the edge
 * passes it to the sandbox host without keeping it, and a task set is the manifest of archives that
 * sessions and rollouts name their tasks from, by index or hash.
 */
import { z } from "zod";
import { CreatedTaskSet, StoredArchive, TaskSet, type CreateTaskSetRequest } from "../../protocol/envs/api.js";
import { publishedArchiveUrl } from "../../protocol/envs/archive-url.js";
import { NotFoundError, SextantError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { EnvSessions } from "./env-sessions.js";
import { Rollouts } from "./rollouts.js";

export type { CreateTaskSetRequest };
export type StoredArchiveInfo = z.infer<typeof StoredArchive>;
export type CreatedTaskSetInfo = z.infer<typeof CreatedTaskSet>;

interface PerRequest {
  signal?: AbortSignal;
}

/** One task of a set being pushed: its archive's bytes and name, and the settings read from it. */
export interface TaskToPush {
  sha256: string;
  archive: Uint8Array;
  settings?: CreateTaskSetRequest["tasks"][number]["settings"];
}

export interface PushedTaskSet extends CreatedTaskSetInfo {
  /** Archives sent in this push. */
  uploaded: string[];
  /** Archives the host already held, not sent again. */
  present: string[];
}

export interface PushOptions extends PerRequest {
  /**
   * Send no archive: the set names each task's archive at `<base>/<sha256>.tar.gz`, a public
   * location the caller publishes it at, which the edge fetches from when a sandbox host lacks it.
   */
  archiveBaseUrl?: string;
  /** Called once per distinct archive, after it is known to be on the host. */
  onArchive?: (event: { sha256: string; uploaded: boolean; done: number }) => void;
}

const archivePath = (sha256: string) => `/v1/envs/archives/${encodeURIComponent(sha256)}`;

/**
 * `sextant.envs`: one method per route, each answer checked against the protocol's schemas, and
 * `pushTaskSet`, which sends what the host lacks and then the manifest.
 *
 * @example
 * const set = await sextant.envs.pushTaskSet([{ sha256, archive }]);
 * console.log(set.id, set.tasks);
 */
export class Envs {
  /** Rollout runs: `run` starts one and yields its events; `events` resumes one; `get` reads one. */
  readonly rollouts: Rollouts;
  /** Sessions: `create` one on a task, then step it, verify it and close it. */
  readonly sessions: EnvSessions;

  constructor(private readonly http: HttpClient) {
    this.rollouts = new Rollouts(http);
    this.sessions = new EnvSessions(http);
  }

  /** The archive as the sandbox host holds it, or null when it holds none by that hash. */
  async archive(sha256: string, opts: PerRequest = {}): Promise<StoredArchiveInfo | null> {
    try {
      return await this.http.request({ method: "GET", path: archivePath(sha256), schema: StoredArchive, ...opts });
    } catch (err) {
      if (err instanceof NotFoundError) return null;
      throw err;
    }
  }

  /** Sends an archive (the host checks its hash and reads it as a task); sending it again is harmless. */
  uploadArchive(sha256: string, archive: Uint8Array, opts: PerRequest = {}): Promise<StoredArchiveInfo> {
    return this.http.request({
      method: "PUT",
      path: archivePath(sha256),
      body: archive,
      headers: { "Content-Type": "application/gzip" },
      schema: StoredArchive,
      idempotent: true,
      ...opts,
    });
  }

  /** A task set of archives the host holds; tasks are then named by index (from 0) or hash. */
  createTaskSet(body: CreateTaskSetRequest, opts: PerRequest = {}): Promise<CreatedTaskSetInfo> {
    return this.http.request({ method: "POST", path: "/v1/envs/tasksets", body, schema: CreatedTaskSet, ...opts });
  }

  getTaskSet(id: string, opts: PerRequest = {}): Promise<TaskSet> {
    return this.http.request({
      method: "GET",
      path: `/v1/envs/tasksets/${encodeURIComponent(id)}`,
      schema: TaskSet,
      ...opts,
    });
  }

  /**
   * Sends each archive the host does not already hold, one task at a time (a task's bytes are let
   * go once sent, so a large set is never in memory whole), then creates the set with the tasks in
   * the order given: a task's index is its place in `tasks`.
   */
  async pushTaskSet(
    tasks: Iterable<TaskToPush> | AsyncIterable<TaskToPush>,
    opts: PushOptions = {},
  ): Promise<PushedTaskSet> {
    const { onArchive, archiveBaseUrl, ...perRequest } = opts;
    const manifest: CreateTaskSetRequest["tasks"] = [];
    const uploaded: string[] = [];
    const present: string[] = [];
    const seen = new Set<string>();
    for await (const task of tasks) {
      manifest.push({
        sha256: task.sha256,
        bytes: task.archive.byteLength,
        ...(archiveBaseUrl !== undefined ? { url: publishedArchiveUrl(archiveBaseUrl, task.sha256) } : {}),
        ...(task.settings ? { settings: task.settings } : {}),
      });
      if (seen.has(task.sha256) || archiveBaseUrl !== undefined) continue;
      seen.add(task.sha256);
      const held = await this.archive(task.sha256, perRequest);
      if (held) present.push(task.sha256);
      else {
        await this.uploadArchive(task.sha256, task.archive, perRequest);
        uploaded.push(task.sha256);
      }
      onArchive?.({ sha256: task.sha256, uploaded: !held, done: seen.size });
    }
    if (manifest.length === 0) throw new SextantError("No tasks to push: a task set holds at least one.");
    const created = await this.createTaskSet({ tasks: manifest }, perRequest);
    return { ...created, uploaded, present };
  }
}
