import type { Principal } from "./principal.js";

export interface KeyCacheOptions {
  /** How long a looked-up key is trusted; the bound on revocation delay in other isolates. */
  ttlMs: number;
  /**
   * How old a trusted entry may get before a request that uses it has it refreshed in the
   * background; default half the TTL. A key in use more often than this never makes a request
   * wait for the database.
   */
  refreshAfterMs?: number;
  /** How long an unknown key is remembered, so a flood of bad keys does not reach D1. */
  negativeTtlMs?: number;
  maxEntries?: number;
  now?: () => number;
}

interface Entry {
  principal: Principal | null;
  expires: number;
  /** From then on, the next request that uses the entry refreshes it in the background. */
  refreshAt: number;
  /** A refresh has been claimed and has not finished. */
  refreshing: boolean;
}

/**
 * An isolate-local, size-bounded LRU of key hash -> principal. It spares the hot path a D1
 * round trip; its TTL is the documented upper bound on how long a revoked key keeps working
 * in an isolate that did not itself process the revocation. A key in use is looked up again
 * ahead of its expiry, off the request path (`claimRefresh`), so its requests do not wait for
 * the database once per TTL; the bound is unchanged, since an entry still expires a TTL after
 * the lookup that filled it.
 */
export class KeyCache {
  readonly #entries = new Map<string, Entry>();
  readonly #ttlMs: number;
  readonly #refreshAfterMs: number;
  readonly #negativeTtlMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;
  /** Counts evictions: a lookup that began before one must not put back what it removed. */
  #evictions = 0;

  constructor(options: KeyCacheOptions) {
    this.#ttlMs = options.ttlMs;
    this.#refreshAfterMs = Math.min(options.refreshAfterMs ?? options.ttlMs / 2, options.ttlMs);
    this.#negativeTtlMs = Math.min(options.negativeTtlMs ?? 5_000, options.ttlMs);
    this.#maxEntries = options.maxEntries ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** `undefined` means "not cached": the caller must look the key up. `null` means "known bad". */
  get(hash: string): Principal | null | undefined {
    const entry = this.#entries.get(hash);
    if (!entry) return undefined;
    if (entry.expires <= this.#now()) {
      this.#entries.delete(hash);
      return undefined;
    }
    this.#entries.delete(hash);
    this.#entries.set(hash, entry);
    return entry.principal;
  }

  /**
   * Taken before a lookup and given back to `set` with its result, so that a lookup that raced
   * an eviction (a revocation in this isolate) does not cache what it read before it.
   */
  ticket(): number {
    return this.#evictions;
  }

  set(hash: string, principal: Principal | null, ticket = this.#evictions): void {
    if (this.#ttlMs <= 0 || ticket !== this.#evictions) return;
    const now = this.#now();
    this.#entries.delete(hash);
    this.#entries.set(hash, {
      principal,
      expires: now + (principal ? this.#ttlMs : this.#negativeTtlMs),
      refreshAt: now + this.#refreshAfterMs,
      refreshing: false,
    });
    while (this.#entries.size > this.#maxEntries) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
  }

  /**
   * Whether the caller should look a known key up again now, in the background, because its
   * entry is due a refresh. True for one caller only, until the entry is replaced by `set` or the
   * claim is given back with `releaseRefresh`. Unknown keys are never refreshed: they just expire.
   */
  claimRefresh(hash: string): boolean {
    const entry = this.#entries.get(hash);
    const now = this.#now();
    // An expired entry is not refreshed but looked up again, by a request that waits for it.
    if (!entry?.principal || entry.refreshing || entry.refreshAt > now || entry.expires <= now) return false;
    entry.refreshing = true;
    return true;
  }

  /** A refresh that failed: the next request may try again (the entry still expires on time). */
  releaseRefresh(hash: string): void {
    const entry = this.#entries.get(hash);
    if (entry) entry.refreshing = false;
  }

  /** Drops every cached principal of a key or an org, after a revocation or a plan change here. */
  evict(match: { keyId?: string; orgId?: string; userId?: string }): void {
    this.#evictions++;
    for (const [hash, entry] of this.#entries) {
      const p = entry.principal;
      if (p && (p.key.id === match.keyId || p.org.id === match.orgId || p.user.id === match.userId))
        this.#entries.delete(hash);
    }
  }

  get size(): number {
    return this.#entries.size;
  }
}
