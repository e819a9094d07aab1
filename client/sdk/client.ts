import { z } from "zod";
import { isWellFormedApiKey } from "../../protocol/api-key.js";
import { GatewayStatus } from "../../protocol/gateway.js";
import {
  AbuseThrottle,
  ApiKeyInfo,
  CreatedApiKey,
  listOf,
  Me,
  Org,
  UsageReport,
  User,
  Workspace,
  WorkspaceDetail,
  type AdminCreateKeyRequest,
  type CreateKeyRequest,
  type CreateOrgRequest,
  type CreateUserRequest,
  type CreateWorkspaceRequest,
  type UpdateOrgRequest,
  type UsageQuery,
} from "../../protocol/schemas.js";
import {
  CommitResponse,
  DiffResponse,
  ReembedResponse,
  SearchResponse,
  StageResponse,
  TreeStatus,
  VECTOR_KEY_HEADER,
  type CommitRequest,
  type DiffRequest,
  type ReembedRequest,
  type SearchRequest,
  type StageRequest,
} from "../../protocol/sync.js";
import { LakeManifest, LakeTable } from "../../protocol/lake.js";
import { Agents } from "./agents.js";
import { Envs } from "./envs.js";
import { Evals } from "./evals.js";
import { Events } from "./events.js";
import { SextantError } from "./errors.js";
import { HttpClient } from "./http.js";

const LakePartitions = z.object({ table: LakeTable, day: z.string(), partitions: z.array(LakeManifest) });
const CompactResult = z.object({ files: z.number().int(), rows: z.number().int(), compacted: z.boolean() });

export const DEFAULT_BASE_URL = "http://127.0.0.1:8787";

export interface ClientOptions {
  /** Defaults to `SEXTANT_BASE_URL`, then the local edge `npm start` runs. */
  baseURL?: string;
  /** Milliseconds per attempt; default 60 s. */
  timeout?: number;
  /** Retries after a connection failure, 408, 429, 503 (and 5xx for idempotent calls); default 2. */
  maxRetries?: number;
  /** Swap in any `fetch`-compatible function: a proxy, a test double, an instrumented one. */
  fetch?: typeof fetch;
  defaultHeaders?: Record<string, string>;
}

export interface SextantOptions extends ClientOptions {
  /** Defaults to `SEXTANT_API_KEY`. */
  apiKey?: string;
}

export interface PerRequest {
  signal?: AbortSignal;
}

const envVar = (name: string): string | undefined =>
  typeof process !== "undefined" ? process.env[name] || undefined : undefined;

function transport(token: string | undefined, options: ClientOptions): HttpClient {
  return new HttpClient({
    baseURL: options.baseURL ?? envVar("SEXTANT_BASE_URL") ?? DEFAULT_BASE_URL,
    token,
    timeout: options.timeout ?? 60_000,
    maxRetries: options.maxRetries ?? 2,
    fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
    ...(options.defaultHeaders ? { defaultHeaders: options.defaultHeaders } : {}),
  });
}

/**
 * The Sextant API for editors and agents.
 *
 * @example
 * const sextant = new Sextant({ apiKey: process.env.SEXTANT_API_KEY });
 * const me = await sextant.me();
 * console.log(me.org.name, me.org.plan);
 */
export class Sextant {
  readonly http: HttpClient;
  /** Coding-agent tasks: create, upload, start, follow, steer, cancel, diff. */
  readonly agents: Agents;
  /** Editor events for the lake: `send`, or a background `recorder()`. */
  readonly events: Events;
  /** Environments: task archives and task sets. */
  readonly envs: Envs;
  /** Eval runs: `run` one over a task set, `get` its report, `list` them, `compare` two. */
  readonly evals: Evals;

  constructor(options: SextantOptions = {}) {
    const apiKey = options.apiKey ?? envVar("SEXTANT_API_KEY");
    if (!apiKey) {
      throw new SextantError("No API key: pass `apiKey`, set SEXTANT_API_KEY, or run `npx sextant login`.");
    }
    if (!isWellFormedApiKey(apiKey)) {
      throw new SextantError(
        "The API key is malformed: Sextant keys look like `sxt_` followed by 46 letters and digits.",
      );
    }
    this.http = transport(apiKey, options);
    this.agents = new Agents(this.http);
    this.events = new Events(this.http);
    this.envs = new Envs(this.http);
    this.evals = new Evals(this.http);
  }

  get baseURL(): string {
    return this.http.options.baseURL;
  }

  /** The org, user and key behind this client's API key. */
  me(opts: PerRequest = {}): Promise<Me> {
    return this.http.request({ method: "GET", path: "/v1/me", schema: Me, ...opts });
  }

  /**
   * Metered model tokens of your org (owners) or yourself (members), per UTC day.
   *
   * @example
   * const report = await sextant.usage({ from: "2026-05-01", groupBy: ["model"] });
   * console.log(report.totals.totalTokens);
   */
  usage(query: UsageQuery = {}, opts: PerRequest = {}): Promise<UsageReport> {
    return this.http.request({
      method: "GET",
      path: "/v1/usage",
      query: { from: query.from, to: query.to, groupBy: query.groupBy?.join(",") },
      schema: UsageReport,
      ...opts,
    });
  }

  readonly keys = {
    list: (opts: PerRequest = {}) =>
      this.http.request({ method: "GET", path: "/v1/keys", schema: listOf(ApiKeyInfo), ...opts }).then((r) => r.data),
    /** The returned `key` is shown once and never again. */
    create: (body: CreateKeyRequest, opts: PerRequest = {}) =>
      this.http.request({ method: "POST", path: "/v1/keys", body, schema: CreatedApiKey, ...opts }),
    revoke: (keyId: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "DELETE",
        path: `/v1/keys/${encodeURIComponent(keyId)}`,
        schema: ApiKeyInfo,
        ...opts,
      }),
  };

  readonly workspaces = {
    list: (opts: PerRequest = {}) =>
      this.http
        .request({ method: "GET", path: "/v1/workspaces", schema: listOf(Workspace), ...opts })
        .then((r) => r.data),
    create: (body: CreateWorkspaceRequest, opts: PerRequest = {}) =>
      this.http.request({ method: "POST", path: "/v1/workspaces", body, schema: Workspace, ...opts }),
    get: (workspaceId: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "GET",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}`,
        schema: WorkspaceDetail,
        ...opts,
      }),
    /** The Merkle root and totals of what the workspace has indexed. */
    tree: (workspaceId: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "GET",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/tree`,
        schema: TreeStatus,
        ...opts,
      }),
    /** Subtrees of the edge's tree, breadth-first, for finding where it differs from the local one. */
    diff: (workspaceId: string, body: DiffRequest, opts: PerRequest = {}) =>
      this.http.request({
        method: "POST",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/tree/diff`,
        body,
        schema: DiffResponse,
        idempotent: true,
        ...opts,
      }),
    /**
     * While the edge moves the index to its embedder (`tree().reembed`), the files already sent for
     * it, a page at a time: a client re-sends only the others.
     */
    reembedded: (workspaceId: string, body: ReembedRequest, opts: PerRequest = {}) =>
      this.http.request({
        method: "POST",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/tree/reembed`,
        body,
        schema: ReembedResponse,
        idempotent: true,
        ...opts,
      }),
    /**
     * Applies files (with their chunks, embedded at the edge) and deletions atomically; replaying a
     * commit changes nothing, so it is retried. `vectorKey` (base64url) is needed when chunks are sent.
     */
    commit: (workspaceId: string, body: CommitRequest, opts: PerRequest & { vectorKey?: string } = {}) =>
      this.http.request({
        method: "POST",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/tree/commit`,
        body,
        schema: CommitResponse,
        idempotent: true,
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(opts.vectorKey ? { headers: { [VECTOR_KEY_HEADER]: opts.vectorKey } } : {}),
      }),
    /**
     * Stages one part of a file's chunks whose whole does not fit one request body; a commit that
     * upserts the file with `stagedParts` claims the parts. Staging a part again replaces it.
     */
    stage: (workspaceId: string, body: StageRequest, opts: PerRequest & { vectorKey: string }) =>
      this.http.request({
        method: "POST",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/tree/stage`,
        body,
        schema: StageResponse,
        idempotent: true,
        headers: { [VECTOR_KEY_HEADER]: opts.vectorKey },
        ...(opts.signal ? { signal: opts.signal } : {}),
      }),
    /** The chunks that best answer a question; paths come back encrypted, for the client to decrypt. */
    search: (workspaceId: string, body: SearchRequest, opts: PerRequest & { vectorKey: string }) =>
      this.http.request({
        method: "POST",
        path: `/v1/workspaces/${encodeURIComponent(workspaceId)}/search`,
        body,
        schema: SearchResponse,
        idempotent: true,
        headers: { [VECTOR_KEY_HEADER]: opts.vectorKey },
        ...(opts.signal ? { signal: opts.signal } : {}),
      }),
    delete: (workspaceId: string, opts: PerRequest = {}) =>
      this.http
        .request({ method: "DELETE", path: `/v1/workspaces/${encodeURIComponent(workspaceId)}`, ...opts })
        .then((): void => undefined),
  };
}

export interface SextantAdminOptions extends ClientOptions {
  /** Defaults to `SEXTANT_ADMIN_SECRET`. */
  adminSecret?: string;
}

/**
 * The operator surface: orgs, users, keys and abuse throttles. Needs the edge's `ADMIN_SECRET`.
 *
 * @example
 * const admin = new SextantAdmin({ adminSecret: process.env.SEXTANT_ADMIN_SECRET });
 * const org = await admin.orgs.create({ name: "Acme", plan: "pro" });
 */
export class SextantAdmin {
  readonly http: HttpClient;

  constructor(options: SextantAdminOptions = {}) {
    const secret = options.adminSecret ?? envVar("SEXTANT_ADMIN_SECRET");
    if (!secret) throw new SextantError("No admin secret: pass `adminSecret` or set SEXTANT_ADMIN_SECRET.");
    this.http = transport(secret, options);
  }

  readonly orgs = {
    create: (body: CreateOrgRequest, opts: PerRequest = {}) =>
      this.http.request({ method: "POST", path: "/admin/orgs", body, schema: Org, ...opts }),
    list: (opts: PerRequest = {}) =>
      this.http.request({ method: "GET", path: "/admin/orgs", schema: listOf(Org), ...opts }).then((r) => r.data),
    get: (orgId: string, opts: PerRequest = {}) =>
      this.http.request({ method: "GET", path: `/admin/orgs/${encodeURIComponent(orgId)}`, schema: Org, ...opts }),
    update: (orgId: string, body: UpdateOrgRequest, opts: PerRequest = {}) =>
      this.http.request({
        method: "PATCH",
        path: `/admin/orgs/${encodeURIComponent(orgId)}`,
        body,
        schema: Org,
        idempotent: true,
        ...opts,
      }),
  };

  readonly users = {
    create: (orgId: string, body: CreateUserRequest, opts: PerRequest = {}) =>
      this.http.request({
        method: "POST",
        path: `/admin/orgs/${encodeURIComponent(orgId)}/users`,
        body,
        schema: User,
        ...opts,
      }),
    list: (orgId: string, opts: PerRequest = {}) =>
      this.http
        .request({
          method: "GET",
          path: `/admin/orgs/${encodeURIComponent(orgId)}/users`,
          schema: listOf(User),
          ...opts,
        })
        .then((r) => r.data),
    findByEmail: (email: string, opts: PerRequest = {}) =>
      this.http
        .request({ method: "GET", path: "/admin/users", query: { email }, schema: listOf(User), ...opts })
        .then((r) => r.data[0] ?? null),
  };

  readonly keys = {
    create: (body: AdminCreateKeyRequest, opts: PerRequest = {}) =>
      this.http.request({ method: "POST", path: "/admin/keys", body, schema: CreatedApiKey, ...opts }),
    list: (orgId: string, opts: PerRequest = {}) =>
      this.http
        .request({ method: "GET", path: "/admin/keys", query: { orgId }, schema: listOf(ApiKeyInfo), ...opts })
        .then((r) => r.data),
    revoke: (keyId: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "DELETE",
        path: `/admin/keys/${encodeURIComponent(keyId)}`,
        schema: ApiKeyInfo,
        ...opts,
      }),
  };

  readonly abuse = {
    /** Active throttles, newest first; with `all`, the latest 500 whatever their state. */
    list: (options: { all?: boolean } = {}, opts: PerRequest = {}) =>
      this.http
        .request({
          method: "GET",
          path: "/admin/abuse",
          query: { all: options.all ? "true" : undefined },
          schema: listOf(AbuseThrottle),
          ...opts,
        })
        .then((r) => r.data),
    /** Lifting an already lifted throttle returns it unchanged, so the call is retried. */
    lift: (throttleId: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "POST",
        path: `/admin/abuse/${encodeURIComponent(throttleId)}/lift`,
        schema: AbuseThrottle,
        idempotent: true,
        ...opts,
      }),
  };

  readonly lake = {
    /** A day's partitions of a table: each hour's manifest (its files, rows, compaction). */
    partitions: (table: LakeTable, day: string, opts: PerRequest = {}) =>
      this.http.request({
        method: "GET",
        path: "/admin/lake/partitions",
        query: { table, day },
        schema: LakePartitions,
        ...opts,
      }),
    /** One Parquet file, by the key its manifest lists. */
    file: (key: string, opts: PerRequest = {}): Promise<Uint8Array> =>
      this.http.request({
        method: "GET",
        path: `/admin/lake/files/${key.split("/").map(encodeURIComponent).join("/")}`,
        responseType: "bytes",
        ...opts,
      }) as Promise<Uint8Array>,
    /** Folds a partition's files into one now, rather than at its scheduled time. */
    compact: (target: { table: LakeTable; day: string; hour: string }, opts: PerRequest = {}) =>
      this.http.request({
        method: "POST",
        path: "/admin/lake/compact",
        body: target,
        schema: CompactResult,
        idempotent: true,
        ...opts,
      }),
  };

  readonly gateway = {
    /** Each pool and endpoint: shared health (probes, ejections, recovery) and the answering isolate's load. */
    status: (opts: PerRequest = {}) =>
      this.http.request({ method: "GET", path: "/admin/gateway", schema: GatewayStatus, ...opts }),
  };
}
