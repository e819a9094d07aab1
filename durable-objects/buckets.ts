/**
 * The arithmetic of a limiter object's token buckets and leases, apart from the object itself so
 * that the isolate side and the benchmarks share it without the Workers runtime.
 */
export interface BucketSpec {
  /** e.g. "tab:requests"; one bucket per name in this object. */
  name: string;
  limit: number;
  windowMs: number;
}

export interface LeaseRequest {
  bucket: BucketSpec;
  /**
   * Units one request must have now, all or none (0 for a top-up): granted only if the bucket
   * holds them, so that a refusal means the limit really is spent.
   */
  need?: number;
  /** Allowance wanted beyond `need` for local use. */
  want: number;
  /** Allowance granted earlier and not used. */
  returned: number;
  /** Spent without a lease (the fast path admitted first) or charged afterwards (tokens). */
  debt: number;
}

export interface LeaseGrant {
  granted: number;
  /** Allowance left in the bucket after this grant (negative while in debt). */
  remaining: number;
  /** Milliseconds until the bucket is full again. */
  resetMs: number;
  /** When nothing was granted: milliseconds until `need` units (at least one) are available. */
  retryAfterMs: number;
}

export interface Throttle {
  reason: string;
  until: number;
}

export interface Bucket {
  tokens: number;
  at: number;
  limit: number;
  windowMs: number;
}

/** Refills a bucket to `now` at `limit` per `windowMs`, capped at `limit`. */
export function refill(bucket: Bucket, now: number): void {
  const elapsed = Math.max(0, now - bucket.at);
  bucket.tokens = Math.min(bucket.limit, bucket.tokens + (elapsed * bucket.limit) / bucket.windowMs);
  bucket.at = now;
}

/**
 * The share of a limit kept back from leases: below it, a lease grants only what its request
 * needs, so that no allowance sits unused in one isolate while another is refused. The isolates'
 * fast path (admit on credit) also stops at this share.
 */
export const LEASE_RESERVE = 0.2;

/**
 * One lease against a bucket: take back unused allowance, charge debt, then grant the request's
 * `need` whole (or nothing) and, while the bucket is above its reserve, up to `want` more.
 */
export function lease(bucket: Bucket, request: Omit<LeaseRequest, "bucket">, now: number): LeaseGrant {
  refill(bucket, now);
  bucket.tokens = Math.min(bucket.limit, bucket.tokens + Math.max(0, request.returned)) - Math.max(0, request.debt);
  const need = Math.max(0, Math.ceil(request.need ?? 0));
  const rate = bucket.limit / bucket.windowMs;
  let granted = 0;
  if (bucket.tokens >= need) {
    const spare = Math.floor(bucket.tokens - need - LEASE_RESERVE * bucket.limit);
    granted = need + Math.max(0, Math.min(Math.floor(request.want), spare));
  }
  bucket.tokens -= granted;
  const short = Math.max(need, 1) - bucket.tokens;
  return {
    granted,
    remaining: Math.floor(bucket.tokens),
    resetMs: Math.ceil((bucket.limit - bucket.tokens) / rate),
    retryAfterMs: granted > 0 || short <= 0 ? 0 : Math.ceil(short / rate),
  };
}
