import OpenAI from "openai";
import type { GatewayConfigInput } from "../../protocol/gateway.js";
import { SextantAdmin } from "../../client/sdk/client.js";
import { startSimulator, type BackendOptions, type Simulator } from "../../gpu-backends/simulator/simulator.js";
import { savedLocalEdge, startLocalEdge, type LocalEdge } from "./local-edge.js";

export const VIRGINIA = { latitude: 39.04, longitude: -77.49 };
export const LONDON = { latitude: 51.51, longitude: -0.13 };

export interface GatewayFixture {
  sim: Simulator;
  edge: LocalEdge;
  apiKey: string;
  admin: SextantAdmin;
  openai(options?: { apiKey?: string; timeout?: number; defaultHeaders?: Record<string, string> }): OpenAI;
  /** `POST /v1<path>` with the fixture's key and a JSON body, for what the SDK hides (raw SSE, status codes). */
  post(path: string, body: unknown): Promise<Response>;
  /** A new org of this plan with one user and key. */
  account(plan: "free" | "pro" | "business"): Promise<{ apiKey: string; userId: string; keyId: string; orgId: string }>;
  stop(): Promise<void>;
}

/**
 * The simulated GPU backends (in this process, so tests can read what they received and when)
 * behind the real local edge (`npm start`'s script), configured by
 * `GATEWAY_CONFIG` built from the simulators' URLs.
 */
export async function startGateway(
  backends: BackendOptions[],
  config: (urls: Record<string, string>) => GatewayConfigInput,
  vars: Record<string, string> = {},
): Promise<GatewayFixture> {
  const sim = await startSimulator({ backends });
  const urls = Object.fromEntries(sim.backends.map((b) => [b.id, b.url]));
  let edge: LocalEdge;
  try {
    edge = await startLocalEdge({ vars: { GATEWAY_CONFIG: JSON.stringify(config(urls)), ...vars } });
  } catch (err) {
    await sim.stop();
    throw err;
  }
  const local = savedLocalEdge(edge);
  const admin = new SextantAdmin({ adminSecret: local.adminSecret, baseURL: edge.baseURL });
  let accounts = 0;
  return {
    sim,
    edge,
    apiKey: local.apiKey,
    admin,
    openai: (options = {}) =>
      new OpenAI({
        apiKey: options.apiKey ?? local.apiKey,
        baseURL: `${edge.baseURL}/v1`,
        maxRetries: 0,
        timeout: options.timeout ?? 20_000,
        defaultHeaders: options.defaultHeaders,
      }),
    post: (path, body) =>
      fetch(`${edge.baseURL}/v1${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${local.apiKey}` },
        body: JSON.stringify(body),
      }),
    account: async (plan) => {
      const n = ++accounts;
      const org = await admin.orgs.create({ name: `${plan} org ${n}`, plan });
      const user = await admin.users.create(org.id, { email: `${plan}-${n}-${Date.now()}@example.com`, role: "owner" });
      const key = await admin.keys.create({ userId: user.id, name: "gateway test" });
      return { apiKey: key.key, userId: user.id, keyId: key.id, orgId: org.id };
    },
    stop: async () => {
      await edge.stop();
      await sim.stop();
    },
  };
}

export async function until<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  ms = 15_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
