/**
 * The task object's side of the sandbox host's protocol (`protocol/agents/sandbox.ts`): plain HTTP
 * to `SANDBOX_URL` with `SANDBOX_TOKEN`. The host answers a repeated call id with its recorded
 * outcome, which is what lets a resumed task re-send a call without running it twice.
 */
import {
  CallResponse,
  DiffResponse,
  SandboxInfo,
  SearchPrepareResponse,
  UploadFilesResponse,
  type CreateSandboxRequest,
  type UploadFilesRequest,
} from "../../protocol/agents/sandbox.js";

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
}

export class SandboxClient {
  constructor(
    private readonly host: SandboxHostConfig,
    private readonly id: string,
  ) {}

  private async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    let response: Response;
    try {
      response = await fetch(`${this.host.url.replace(/\/$/, "")}/v1/sandboxes${path}`, {
        method,
        headers: {
          Authorization: `Bearer ${this.host.token}`,
          ...(body ? { "Content-Type": "application/json" } : {}),
        },
        ...(body ? { body: JSON.stringify(body) } : {}),
        ...(signal ? { signal } : {}),
      });
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

  async create(request: Omit<CreateSandboxRequest, "id">): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request("POST", "", { ...request, id: this.id }));
  }

  async info(): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request("GET", `/${this.id}`));
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
