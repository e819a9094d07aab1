/**
 * The isolate's gateway state: one balancer per configuration, its health snapshot refreshed in
 * the background, and the tab requests in flight per editor session.
 */
import { Balancer } from "./balancer.js";
import { loadGateway, type Gateway } from "./config.js";
import { later } from "../later.js";

let current: { gateway: Gateway; balancer: Balancer } | undefined;
let refreshing: Promise<void> | undefined;

export function gatewayRuntime(env: Env): { gateway: Gateway; balancer: Balancer } | null {
  const gateway = loadGateway(env);
  if (!gateway) return null;
  if (current?.gateway.fingerprint !== gateway.fingerprint)
    current = { gateway, balancer: new Balancer(gateway.config) };
  else current.gateway = gateway;
  return current;
}

function healthStub(env: Env) {
  return env.GATEWAY_HEALTH.get(env.GATEWAY_HEALTH.idFromName("global"));
}

/** Every record of the shared health object, for the operator's view (never on a request's path). */
export function healthRecords(env: Env) {
  return healthStub(env).records();
}

/** Refreshes the health snapshot when it is stale; never awaited by a request. */
export function refreshHealth(env: Env, balancer: Balancer, waitUntil: (p: Promise<unknown>) => void): void {
  const now = Date.now();
  if (refreshing || now - balancer.snapshotAt < balancer.config.health.snapshotMaxAgeMs) return;
  refreshing = (async () => {
    // One timer turn first: the request that noticed the stale snapshot sends its own call first.
    await later();
    try {
      const snapshot = await healthStub(env).snapshot();
      if (snapshot) {
        balancer.snapshot = snapshot;
        balancer.snapshotAt = Date.now();
      }
    } catch (err) {
      // Keep the last snapshot; try again on a later request.
      balancer.snapshotAt = Date.now();
      console.error(JSON.stringify({ level: "warn", message: "health snapshot refresh failed", error: String(err) }));
    } finally {
      refreshing = undefined;
    }
  })();
  waitUntil(refreshing);
}

export function reportEjection(env: Env, endpointId: string, until: number, waitUntil: (p: Promise<unknown>) => void) {
  waitUntil(
    healthStub(env)
      .eject(endpointId, until)
      .catch((err: unknown) =>
        console.error(JSON.stringify({ level: "warn", message: "reporting an ejection failed", error: String(err) })),
      ),
  );
}

/**
 * In-flight tab requests by editor session: a newer one cancels the older. The older request's
 * I/O belongs to its own request context, so the newer one only resolves a promise and the older
 * request aborts itself when it resumes.
 */
const sessions = new Map<string, () => void>();

export function supersede(session: string, controller: AbortController): () => void {
  sessions.get(session)?.();
  let cancel!: () => void;
  const cancelled = new Promise<void>((resolve) => (cancel = resolve));
  void cancelled.then(() => controller.abort(new Error("superseded by a newer request of the same session")));
  sessions.set(session, cancel);
  return () => {
    if (sessions.get(session) === cancel) sessions.delete(session);
  };
}
