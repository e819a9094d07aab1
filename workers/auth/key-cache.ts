import type { Principal } from "./principal.js";

export interface KeyCacheOptions {
  /** How long a looked-up key is trusted; the bound on revocation delay in other isolates. */
  ttlMs: number;
  /** How long an unknown key is remembered, so a flood of bad keys does not reach D1. */
  negativeTtlMs?: number;
  maxEntries?: number;
  now?: () => number;
}

interface Entry {
  principal: Principal | null;
  expires: number;
}

/**
 * An isolate-local, size-bounded LRU of key hash -> principal. It spares the hot path a D1
 * round trip; its TTL is the documented upper bound on how long a revoked key keeps working
 * in an isolate that did not itself process the revocation.
 */
export class KeyCache {
  readonly #entries = new Map<string, Entry>();
  readonly #ttlMs: number;
  readonly #negativeTtlMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;

  constructor(options: KeyCacheOptions) {
    this.#ttlMs = options.ttlMs;
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

  set(hash: string, principal: Principal | null): void {
    if (this.#ttlMs <= 0) return;
    this.#entries.delete(hash);
    this.#entries.set(hash, {
      principal,
      expires: this.#now() + (principal ? this.#ttlMs : this.#negativeTtlMs),
    });
    while (this.#entries.size > this.#maxEntries) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
  }

  /** Drops every cached principal of a key or an org, after a revocation or a plan change here. */
  evict(match: { keyId?: string; orgId?: string; userId?: string }): void {
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
