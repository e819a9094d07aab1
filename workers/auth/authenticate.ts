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
 * lookup; valid ones cost a D1 query at most once per TTL per isolate.
 */
export async function authenticate(
  env: Env,
  config: Config,
  authorization: string | undefined,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<Principal> {
  const token = bearerToken(authorization);
  if (!token) throw unauthenticated("Send your API key as `Authorization: Bearer sxt_…`.");
  if (!isWellFormedApiKey(token)) throw unauthenticated("The API key is malformed.");

  const hash = await hashApiKey(token);
  const cached = keyCache(config).get(hash);
  let principal = cached;
  if (principal === undefined) {
    const db = database(env.DB);
    principal = await findPrincipalByHash(db, hash);
    keyCache(config).set(hash, principal);
    // Touch only on a cache refresh: last-used is accurate to the cache TTL and costs no write per request.
    if (principal && !principal.key.revokedAt) waitUntil(touchApiKey(db, principal.key.id, new Date()));
  }
  if (!principal) throw unauthenticated("The API key is not recognised.");
  if (principal.key.revokedAt) throw unauthenticated("The API key has been revoked.");
  if (principal.key.expiresAt && Date.parse(principal.key.expiresAt) <= Date.now()) {
    throw unauthenticated("The API key has expired.");
  }
  return principal;
}
