/**
 * A sandbox host of a test's own (in this process, on a free port, under a temp root) and a small
 * client for its protocol that returns status and body as they came, errors included.
 */
import { bubblewrapWorks } from "../../sandboxes/drivers.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { CreateSandboxRequest } from "../../protocol/agents/sandbox.js";
import { startSandboxHost, type SandboxHost, type SandboxHostOptions } from "../../sandboxes/host.js";

export const TOKEN = "test-token-0123456789abcdef";

/** Whether bubblewrap can make a sandbox here (installed, and namespaces allowed); checked once. */
export const bwrapRuns = bubblewrapWorks();

/**
 * Whether the isolation tests run: where bubblewrap can make a sandbox, and always under CI=true,
 * where a machine that cannot must fail them rather than pass them by not running them.
 */
export const isolationTestsRun = bwrapRuns || !!process.env.CI;

export interface TestHost {
  url: string;
  root: string;
  /** How the host caps a sandbox as a whole (what it said at start). */
  isolation: SandboxHost["isolation"];
  request(method: string, path: string, body?: unknown, token?: string | null): Promise<{ status: number; body: any }>;
  create(id: string, request?: Omit<CreateSandboxRequest, "id">): Promise<void>;
  upload(id: string, files: Record<string, string>, executable?: string[]): Promise<void>;
  call(id: string, callId: string, tool: string, args: unknown): Promise<any>;
}

/** Starts a host before the file's tests and stops it (and removes its root) after them. */
export function useHost(options: Partial<SandboxHostOptions> = {}): TestHost {
  let stop: () => Promise<void> = async () => {};
  const host = { url: "", root: "" } as TestHost;
  beforeAll(async () => {
    host.root = mkdtempSync(join(tmpdir(), "sextant-sandbox-test-"));
    const started = await startSandboxHost({ token: TOKEN, root: host.root, driver: "direct", ...options });
    host.url = started.url;
    host.isolation = started.isolation;
    stop = started.stop;
  });
  afterAll(async () => {
    await stop();
    rmSync(host.root, { recursive: true, force: true });
  });

  host.request = async (method, path, body, token = TOKEN) => {
    const response = await fetch(`${host.url}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { Authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  host.create = async (id, request = {}) => {
    const r = await host.request("POST", "/v1/sandboxes", { ...request, id });
    if (r.status !== 201) throw new Error(`create ${id}: ${r.status} ${JSON.stringify(r.body)}`);
  };
  host.upload = async (id, files, executable = []) => {
    const r = await host.request("POST", `/v1/sandboxes/${id}/files`, {
      files: Object.entries(files).map(([path, content]) => ({
        path,
        content: Buffer.from(content).toString("base64"),
        executable: executable.includes(path),
      })),
    });
    if (r.status !== 200) throw new Error(`upload to ${id}: ${r.status} ${JSON.stringify(r.body)}`);
  };
  host.call = async (id, callId, tool, args) => {
    const r = await host.request("POST", `/v1/sandboxes/${id}/calls/${callId}`, { tool, args });
    if (r.status !== 200) throw new Error(`call ${callId}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  return host;
}

let calls = 0;
/** A fresh call id. */
export const callId = () => `call-${++calls}`;
