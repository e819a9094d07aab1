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
  /** Allowance wanted for local use. */
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
  /** When nothing was granted: milliseconds until one unit is available. */
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

/** One lease against a bucket: take back unused allowance, charge debt, grant what is there. */
export function lease(bucket: Bucket, request: Omit<LeaseRequest, "bucket">, now: number): LeaseGrant {
  refill(bucket, now);
  bucket.tokens = Math.min(bucket.limit, bucket.tokens + Math.max(0, request.returned)) - Math.max(0, request.debt);
  const granted = Math.max(0, Math.min(Math.floor(request.want), Math.floor(bucket.tokens)));
  bucket.tokens -= granted;
  const rate = bucket.limit / bucket.windowMs;
  return {
    granted,
    remaining: Math.floor(bucket.tokens),
    resetMs: Math.ceil((bucket.limit - bucket.tokens) / rate),
    retryAfterMs: granted > 0 || bucket.tokens >= 1 ? 0 : Math.ceil((1 - bucket.tokens) / rate),
  };
}
