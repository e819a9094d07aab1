/**
 * The sandbox host's wire protocol: how a task object creates a task's sandbox, fills it with the
 * task's files, runs tool calls in it and takes the diff out. The host runs as a local process
 * (bubblewrap per sandbox) or inside a Cloudflare Container; either way it answers this protocol, and
 * it never holds a model key or a Sextant key: it is called, it does not call out.
 *
 * Routes: `POST /v1/sandboxes` (create), `GET`/`DELETE /v1/sandboxes/{id}`, `POST …/{id}/files`,
 * `POST …/{id}/calls/{callId}`, `POST …/{id}/stop` (kills the running commands, keeps the tree),
 * `GET …/{id}/diff`, and `POST …/{id}/search` (the edge request of a codebase_search).
 *
 * Environments (Harbor tasks): `PUT`/`GET /v1/archives/{sha256}` (a task's gzip'd tar, checked,
 * parsed and cached by its hash, out of every sandbox's reach), a create with `task: { archive }`
 * (the task's environment is the starting tree), `POST …/{id}/verify/{callId}` (the task's tests,
 * copied in only then, score the tree) and `POST …/{id}/solve/{callId}` (the reference solution, for
 * checking a task set; never offered to agents).
 *
 * codebase_search takes two steps, since the host has the workspace secret and the task object has
 * the edge: `…/search` turns the tool's arguments into the edge's search request (its scope
 * encrypted) and the key the edge needs for it; the task object sends that to the edge's search
 * route and passes the answer back in the call (`answer`), where the host decrypts its paths and
 * reads the lines from the tree.
 *
 * Every request carries `Authorization: Bearer <SANDBOX_TOKEN>`. A call is identified by the task's
 * call id: the host runs each id once and answers a repeated id with the recorded outcome, so a task
 * object that resumes after a crash can re-send a call without a write or a command running twice.
 */
import { z } from "zod";
import { TaskSettings } from "../envs/harbor.js";
import { Sha256Hex } from "../envs/task-archive.js";
import { SearchRequest, SearchResponse } from "../sync.js";
import { TaskWorkspace } from "./task.js";
import { CodebaseSearchArgs, ToolOutcome, TreePath } from "./tools.js";

export const SandboxId = z.string().regex(/^[A-Za-z0-9_-]{8,64}$/, "8 to 64 of A-Z a-z 0-9 _ -");
export const CallId = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/);

export const SandboxLimits = z.strictObject({
  /** Address space of each command, in bytes. */
  memoryBytes: z
    .number()
    .int()
    .min(64 * 2 ** 20)
    .max(16 * 2 ** 30)
    .default(2 * 2 ** 30),
  /** Processes a command may have running at once (its own included). */
  pids: z.number().int().min(4).max(4096).default(256),
  /** CPU seconds of each command. */
  cpuSeconds: z.number().int().min(1).max(3600).default(300),
  /** Bytes of stdout and stderr kept from a command (each), and of any tool's result. */
  outputBytes: z
    .number()
    .int()
    .min(1024)
    .max(16 * 2 ** 20)
    .default(256 * 2 ** 10),
  /** The longest any command may run, whatever it asks for. */
  commandTimeoutMs: z.number().int().min(100).max(3_600_000).default(300_000),
  /** Bytes the tree may hold in all. */
  diskBytes: z
    .number()
    .int()
    .min(1 * 2 ** 20)
    .max(64 * 2 ** 30)
    .default(2 * 2 ** 30),
});
export type SandboxLimits = z.infer<typeof SandboxLimits>;

export const CreateSandboxRequest = z.strictObject({
  id: SandboxId,
  limits: SandboxLimits.default(SandboxLimits.parse({})),
  /** Seconds without a request after which the host destroys the sandbox by itself. */
  idleTtlSeconds: z.number().int().min(10).max(86_400).default(3600),
  /** The workspace whose index codebase_search reads: held in the host's memory only, never written. */
  workspace: TaskWorkspace.optional(),
  /**
   * Whose task this is, as an opaque tag (a keyed hash of the org, never its id): the host shares its
   * workers and CPU fairly between tenants. Without one, the sandbox is a tenant of its own.
   */
  tenant: z
    .string()
    .regex(/^[A-Za-z0-9_-]{8,64}$/)
    .optional(),
  /**
   * A Harbor task, by the hash of its archive (uploaded first with `PUT /v1/archives/{sha256}`): the
   * task's environment is the starting tree and the diff's base, and its task.toml's `memory_mb` and
   * `storage_mb` (capped) replace `limits.memoryBytes` and `limits.diskBytes`. 404 `not_found` when
   * the host does not hold the archive (the edge uploads it and creates again).
   */
  task: z.strictObject({ archive: Sha256Hex }).optional(),
});
export type CreateSandboxRequest = z.input<typeof CreateSandboxRequest>;

export const SandboxInfo = z.object({
  id: SandboxId,
  /** How the host isolates commands: `bubblewrap`, `container`, `memory`. */
  driver: z.string(),
  /**
   * A random 256-bit key (base64url) made with the sandbox and held only by the host: the task object
   * seals its stored events with it, so once the sandbox is gone what the object stored cannot be read.
   */
  dataKey: z.string(),
  files: z.number().int(),
  bytes: z.number().int(),
  /** Seconds the sandbox's commands have run, summed: what a task's `sandboxSeconds` budget counts. */
  commandSeconds: z.number(),
  createdAt: z.iso.datetime(),
  /** The sandbox's Harbor task, when it was made from one (the instruction held in memory only). */
  task: z
    .object({
      archive: Sha256Hex,
      instruction: z.string(),
      verifierTimeoutSec: z.number(),
      agentTimeoutSec: z.number().nullable(),
      hasSolution: z.boolean(),
      settings: TaskSettings,
      /** Whether the task has been verified: after that the tree holds the tests' leftovers. */
      verified: z.boolean(),
    })
    .optional(),
});
export type SandboxInfo = z.infer<typeof SandboxInfo>;

/** `PUT /v1/archives/{sha256}` (201) and `GET /v1/archives/{sha256}` (200): an archive the host holds. */
export const ArchiveInfo = z.object({ sha256: Sha256Hex, bytes: z.number().int() });
export type ArchiveInfo = z.infer<typeof ArchiveInfo>;

/** `POST …/{id}/verify/{callId}`: the task's tests score the tree, once per call id. */
export const VerifyRequest = z.strictObject({
  /** Shorter than the task's `[verifier].timeout_sec`, never longer. */
  timeoutMs: z.number().int().min(100).max(3_600_000).optional(),
});
export type VerifyRequest = z.input<typeof VerifyRequest>;
export const VerifyResponse = z.object({
  /** `reward.json`'s `reward` (else the mean of its numbers), else `reward.txt`'s number, else 0. */
  reward: z.number(),
  /** `reward.json`'s numbers by name (`{ reward }` from `reward.txt`; `{}` with no reward file). */
  components: z.record(z.string(), z.number()),
  /** The test's stdout and stderr (capped), and why the reward is 0 when no reward file was written. */
  log: z.string(),
  exitCode: z.number().int().nullable(),
  timedOut: z.boolean().default(false),
  durationMs: z.number(),
  replayed: z.boolean(),
});
export type VerifyResponse = z.infer<typeof VerifyResponse>;

/** `POST …/{id}/solve/{callId}`: runs the task's `solution/solve.sh` in the tree, once per call id. */
export const SolveRequest = VerifyRequest;
export type SolveRequest = z.input<typeof SolveRequest>;
export const SolveResponse = z.object({
  exitCode: z.number().int().nullable(),
  timedOut: z.boolean().default(false),
  log: z.string(),
  durationMs: z.number(),
  replayed: z.boolean(),
});
export type SolveResponse = z.infer<typeof SolveResponse>;

export const UploadedFile = z.strictObject({
  path: TreePath,
  /** The file's bytes, base64. */
  content: z.string().max(14_000_000),
  executable: z.boolean().default(false),
});
export const UploadFilesRequest = z.strictObject({ files: z.array(UploadedFile).min(1).max(2000) });
export type UploadFilesRequest = z.input<typeof UploadFilesRequest>;
export const UploadFilesResponse = z.object({ files: z.number().int(), bytes: z.number().int() });

export const SearchPrepareRequest = CodebaseSearchArgs;
export const SearchPrepareResponse = z.object({
  workspaceId: z.string(),
  /** The workspace's vector key (base64url), for the edge's `X-Sextant-Vector-Key`: used once, never stored. */
  vectorKey: z.string(),
  request: SearchRequest,
});
export type SearchPrepareResponse = z.infer<typeof SearchPrepareResponse>;
/** A codebase_search call as the host runs it: the tool's arguments and the edge's answer. */
export const CodebaseSearchCall = CodebaseSearchArgs.extend({ answer: SearchResponse });

export const CallRequest = z.strictObject({ tool: z.string().min(1).max(64), args: z.unknown() });
export type CallRequest = z.infer<typeof CallRequest>;
export const CallResponse = ToolOutcome.and(
  z.object({
    /** True when this call id had run before and this is its recorded outcome. */
    replayed: z.boolean(),
    durationMs: z.number(),
  }),
);
export type CallResponse = z.infer<typeof CallResponse>;

export const DiffResponse = z.object({
  /** A unified diff (`git apply`-able) from the uploaded tree to the tree now. */
  diff: z.string(),
  filesChanged: z.number().int(),
  insertions: z.number().int(),
  deletions: z.number().int(),
  /**
   * Changed files the diff leaves out, and why: `binary`, `too_large` (over 2 MiB, told changed by
   * their hash), `diff_budget` (past the diff's 16 MiB), `not_regular`, `symlink`, `unreadable`.
   */
  skipped: z.array(z.object({ path: z.string(), reason: z.string() })).default([]),
});
export type DiffResponse = z.infer<typeof DiffResponse>;

/** The host's errors: `{ code, message }` with one of these codes. */
export const SANDBOX_ERRORS = [
  "invalid_request",
  "unauthenticated",
  "not_found",
  "conflict",
  "payload_too_large",
  "disk_full",
  /** 429: the tenant (or the host) holds its share of sandboxes or disk. */
  "busy",
] as const;
export const SandboxError = z.object({ code: z.enum(SANDBOX_ERRORS), message: z.string() });
