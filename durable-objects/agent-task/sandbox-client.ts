/**
 * The task object's side of the sandbox host's protocol (`protocol/agents/sandbox.ts`): HTTP with
 * `SANDBOX_TOKEN`, to the host at `SANDBOX_URL`, or (`SANDBOX_HOSTS = "containers"`) to the task's own
 * Cloudflare Container through the `SANDBOX_CONTAINER` binding. The host answers a repeated call id
 * with its recorded outcome, which is what lets a resumed task re-send a call without running it twice.
 */
import {
  CallResponse,
  DiffResponse,
  SandboxInfo,
  SolveResponse,
  VerifyResponse,
  SearchPrepareResponse,
  UploadFilesResponse,
  type CreateSandboxRequest,
  type UploadFilesRequest,
} from "../../protocol/agents/sandbox.js";
import type { SandboxContainer } from "../sandbox-container.js";

export class SandboxUnavailable extends Error {
  override readonly name = "SandboxUnavailable";
  constructor(
    message: string,
    readonly status: number | null,
    readonly code?: string,
  ) {
    super(message);
  }
}

export interface SandboxHostConfig {
  url: string;
  token: string;
  /** What requests go through: the task's container's stub, or (when absent) the global fetch. */
  fetcher?: { fetch(input: string, init?: RequestInit): Promise<Response> };
}

/** The settings that say where sandbox hosts are. */
export interface SandboxSettings {
  /** `url` (the default: one host at `SANDBOX_URL`) or `containers` (a Cloudflare Container per task). */
  SANDBOX_HOSTS?: string;
  SANDBOX_URL?: string;
  SANDBOX_TOKEN?: string;
  SANDBOX_CONTAINER?: DurableObjectNamespace<SandboxContainer>;
}

/** The address a task's container is reached at; the stub, not the name, routes it. */
const CONTAINER_URL = "http://sandbox-host.container";

/** Where task `taskId`'s sandbox host is, or why this edge has none (a sentence for a 503). */
export function sandboxHost(env: SandboxSettings, taskId: string): SandboxHostConfig | string {
  const mode = env.SANDBOX_HOSTS ?? "url";
  if (!env.SANDBOX_TOKEN || env.SANDBOX_TOKEN.length < 16)
    return "Agent tasks are not set up on this edge: SANDBOX_TOKEN (16 characters or more) authenticates it to its sandbox hosts.";
  if (mode === "containers") {
    if (!env.SANDBOX_CONTAINER)
      return "SANDBOX_HOSTS is `containers`, but the Worker has no SANDBOX_CONTAINER binding: deploy with `npm run deploy -- --containers`.";
    const stub = env.SANDBOX_CONTAINER.get(env.SANDBOX_CONTAINER.idFromName(taskId));
    return { url: CONTAINER_URL, token: env.SANDBOX_TOKEN, fetcher: stub };
  }
  if (mode !== "url") return `SANDBOX_HOSTS is \`${mode}\`: it is \`url\` or \`containers\`.`;
  if (!env.SANDBOX_URL || !/^https?:\/\//.test(env.SANDBOX_URL))
    return "Agent tasks are not set up on this edge: SANDBOX_URL names its sandbox host (or SANDBOX_HOSTS = `containers`).";
  return { url: env.SANDBOX_URL, token: env.SANDBOX_TOKEN };
}

export class SandboxClient {
  constructor(
    private readonly host: SandboxHostConfig,
    private readonly id: string,
  ) {}

  private async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    let response: Response;
    try {
      response = await (this.host.fetcher ?? globalThis).fetch(
        `${this.host.url.replace(/\/$/, "")}/v1/sandboxes${path}`,
        {
          method,
          headers: {
            Authorization: `Bearer ${this.host.token}`,
            ...(body ? { "Content-Type": "application/json" } : {}),
          },
          ...(body ? { body: JSON.stringify(body) } : {}),
          ...(signal ? { signal } : {}),
        },
      );
    } catch (err) {
      throw new SandboxUnavailable(`The sandbox host is unreachable: ${(err as Error).message}`, null);
    }
    if (response.status === 204) return undefined;
    const text = await response.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    if (!response.ok) {
      const error = json as { code?: string; message?: string } | undefined;
      throw new SandboxUnavailable(
        error?.message ?? `The sandbox host answered ${response.status}.`,
        response.status,
        error?.code,
      );
    }
    return json;
  }

  /** With `task`, the sandbox starts from that archive's task (404 `not_found` if the host lacks it). */
  async create(request: Omit<CreateSandboxRequest, "id"> & { task?: { archive: string } }): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request("POST", "", { ...request, id: this.id }));
  }

  /**
   * `create`, for a task that has recorded no sandbox: one the host already holds under the task's id
   * (409) was left by an earlier try of this create whose answer was lost (the edge stopped, or the
   * connection broke, after the host made it), so nothing has used it; it is destroyed and made
   * again. One the host is still making answers 409 again, and the caller tries later.
   */
  async createAfresh(request: Parameters<SandboxClient["create"]>[0]): Promise<SandboxInfo> {
    try {
      return await this.create(request);
    } catch (err) {
      if (!(err instanceof SandboxUnavailable && err.status === 409)) throw err;
      await this.destroy();
      return this.create(request);
    }
  }

  /** Sends a task archive to this sandbox's host (`putArchive`), which checks its hash and task. */
  putArchive(sha256: string, archive: Uint8Array): Promise<{ status: number; body: unknown }> {
    const body = new ReadableStream<Uint8Array>({
      start(out) {
        out.enqueue(archive);
        out.close();
      },
    });
    return putArchive(this.host, sha256, body, archive.byteLength);
  }

  async info(): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request("GET", `/${this.id}`));
  }

  /** Runs the task's tests on the tree (once per call id; a repeat answers the record). */
  async verify(callId: string, timeoutMs?: number): Promise<VerifyResponse> {
    return VerifyResponse.parse(
      await this.request("POST", `/${this.id}/verify/${encodeURIComponent(callId)}`, timeoutMs ? { timeoutMs } : {}),
    );
  }

  /** Runs the task's reference solution on the tree (once per call id). */
  async solve(callId: string, timeoutMs?: number): Promise<SolveResponse> {
    return SolveResponse.parse(
      await this.request("POST", `/${this.id}/solve/${encodeURIComponent(callId)}`, timeoutMs ? { timeoutMs } : {}),
    );
  }

  async upload(files: UploadFilesRequest["files"]): Promise<{ files: number; bytes: number }> {
    return UploadFilesResponse.parse(await this.request("POST", `/${this.id}/files`, { files }));
  }

  async call(callId: string, tool: string, args: unknown, signal?: AbortSignal): Promise<CallResponse> {
    return CallResponse.parse(
      await this.request("POST", `/${this.id}/calls/${encodeURIComponent(callId)}`, { tool, args }, signal),
    );
  }

  /** codebase_search's first step: the edge's search request for `args`, and the key it needs. */
  async prepareSearch(args: unknown): Promise<SearchPrepareResponse> {
    return SearchPrepareResponse.parse(await this.request("POST", `/${this.id}/search`, args));
  }

  async diff(): Promise<DiffResponse> {
    return DiffResponse.parse(await this.request("GET", `/${this.id}/diff`));
  }

  /** Kills the sandbox's running commands; its tree and records stay. */
  async stop(): Promise<void> {
    await this.request("POST", `/${this.id}/stop`);
  }

  async destroy(): Promise<void> {
    try {
      await this.request("DELETE", `/${this.id}`);
    } catch (err) {
      if (!(err instanceof SandboxUnavailable && err.status === 404)) throw err;
    }
  }
}

/**
 * Streams a task archive to the sandbox host (`PUT /v1/archives/{sha256}`), which checks its hash
 * and its task; the host's answer comes back as it is, status and body, for the edge to pass on.
 */
export async function putArchive(
  host: SandboxHostConfig,
  sha256: string,
  body: ReadableStream<Uint8Array>,
  bytes: number,
): Promise<{ status: number; body: unknown }> {
  let response: Response;
  try {
    response = await (host.fetcher ?? globalThis).fetch(`${host.url.replace(/\/$/, "")}/v1/archives/${sha256}`, {
      method: "PUT",
      headers: {
        Authorization: `Bearer ${host.token}`,
        "Content-Type": "application/gzip",
        "Content-Length": String(bytes),
      },
      body,
      // A streamed body: workerd sends it as it comes.
      duplex: "half",
    } as RequestInit);
  } catch (err) {
    throw new SandboxUnavailable(`The sandbox host is unreachable: ${(err as Error).message}`, null);
  }
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, body: json };
}

/**
 * Whether the sandbox host holds an archive (`GET /v1/archives/{sha256}`): its size, or null when it
 * holds none by that hash (never sent, or evicted from its cache).
 */
export async function archiveInfo(
  host: SandboxHostConfig,
  sha256: string,
): Promise<{ sha256: string; bytes: number } | null> {
  let response: Response;
  try {
    response = await (host.fetcher ?? globalThis).fetch(`${host.url.replace(/\/$/, "")}/v1/archives/${sha256}`, {
      headers: { Authorization: `Bearer ${host.token}` },
    });
  } catch (err) {
    throw new SandboxUnavailable(`The sandbox host is unreachable: ${(err as Error).message}`, null);
  }
  const json = (await response.json().catch(() => undefined)) as { sha256?: string; bytes?: number; message?: string };
  if (response.status === 404) return null;
  if (!response.ok || typeof json?.bytes !== "number")
    throw new SandboxUnavailable(json?.message ?? `The sandbox host answered ${response.status}.`, response.status);
  return { sha256, bytes: json.bytes };
}

/**
 * The org as the sandbox host knows it, for sharing its workers and CPU fairly: a hash, so the host
 * (which holds no key and stores nothing) never learns an org's id.
 */
export async function tenantTag(orgId: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`sextant-sandbox-tenant:${orgId}`));
  let text = "";
  for (const byte of new Uint8Array(digest).subarray(0, 16)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
