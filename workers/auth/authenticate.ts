import { hashApiKey, isWellFormedApiKey } from "../../protocol/api-key.js";
import type { Config } from "../config.js";
import { findPrincipalByHash, touchApiKey } from "../db/accounts.js";
import { database } from "../db/client.js";
import { ApiError } from "../problem.js";
import { KeyCache } from "./key-cache.js";
import type { Principal } from "./principal.js";

let cache: KeyCache | undefined;

/** The isolate's key cache, created on first use with the configured TTL. */
export function keyCache(config: Config): KeyCache {
  cache ??= new KeyCache({ ttlMs: config.KEY_CACHE_TTL_SECONDS * 1000 });
  return cache;
}

const unauthenticated = (detail: string) =>
  new ApiError("unauthenticated", detail, { headers: { "WWW-Authenticate": 'Bearer realm="sextant"' } });

export function bearerToken(header: string | undefined): string | undefined {
  const match = header?.match(/^Bearer\s+(\S+)\s*$/i);
  return match?.[1];
}

/**
 * Resolves the request's API key to a principal. Malformed keys are refused without any
 * lookup; valid ones cost a D1 query at most once per TTL per isolate, and a key in use is
 * looked up again in the background before its entry expires, so its requests do not wait for it.
 */
export async function authenticate(
  env: Env,
  config: Config,
  authorization: string | undefined,
  waitUntil: (promise: Promise<unknown>) => void,
  cache: KeyCache = keyCache(config),
): Promise<Principal> {
  const token = bearerToken(authorization);
  if (!token) throw unauthenticated("Send your API key as `Authorization: Bearer sxt_…`.");
  if (!isWellFormedApiKey(token)) throw unauthenticated("The API key is malformed.");

  const hash = await hashApiKey(token);
  let principal = cache.get(hash);
  if (principal === undefined) principal = await lookUp(env, cache, hash, waitUntil).catch(keysUnavailable);
  else if (principal && cache.claimRefresh(hash))
    waitUntil(
      lookUp(env, cache, hash, waitUntil)
        .catch((err: unknown) =>
          // Not fatal: the entry still expires on time, and the lookup is tried again before then.
          console.error(
            JSON.stringify({ level: "warn", message: "key cache refresh failed", error: (err as Error)?.name }),
          ),
        )
        .finally(() => cache.releaseRefresh(hash)),
    );
  if (!principal) throw unauthenticated("The API key is not recognised.");
  if (principal.key.revokedAt) throw unauthenticated("The API key has been revoked.");
  if (principal.key.expiresAt && Date.parse(principal.key.expiresAt) <= Date.now()) {
    throw unauthenticated("The API key has expired.");
  }
  return principal;
}

/**
 * D1 failed while a key not in the cache was looked up: the request cannot be authenticated, but
 * nothing is wrong with it, so it gets 503 and a retry rather than 401 (the key may be valid) or 500.
 */
function keysUnavailable(err: unknown): never {
  console.error(
    JSON.stringify({
      level: "error",
      message: "API key lookup failed",
      error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
    }),
  );
  throw new ApiError("unavailable", "API keys cannot be checked right now; retry shortly.", {
    headers: { "Retry-After": "1" },
  });
}

/** Reads a key's principal from D1 into the cache. */
async function lookUp(
  env: Env,
  cache: KeyCache,
  hash: string,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<Principal | null> {
  const ticket = cache.ticket();
  const db = database(env.DB);
  const principal = await findPrincipalByHash(db, hash);
  cache.set(hash, principal, ticket);
  // Touch only on a lookup: last-used is accurate to the cache TTL and costs no write per request.
  // Its failure costs one stale last-used time, never the request, so it is logged and let go.
  if (principal && !principal.key.revokedAt)
    waitUntil(
      touchApiKey(db, principal.key.id, new Date()).catch((err: unknown) =>
        console.error(
          JSON.stringify({
            level: "warn",
            message: "API key last-used update failed",
            error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
          }),
        ),
      ),
    );
  return principal;
}
