/** The IETF rate limit header fields as the edge sends them. */
export interface RateLimitField {
  policy: string;
  remaining: number;
  resetSeconds: number;
}

/** The `RateLimit` field (draft-ietf-httpapi-ratelimit-headers): `"policy";r=remaining;t=reset`. */
export function parseRateLimit(headers: Headers): RateLimitField | undefined {
  const match = headers.get("RateLimit")?.match(/^\s*"([^"]*)"\s*((?:;\s*[a-z]+=\d+\s*)+)/);
  if (!match) return undefined;
  const params = Object.fromEntries([...match[2]!.matchAll(/([a-z]+)=(\d+)/g)].map((m) => [m[1]!, Number(m[2])]));
  if (params.r === undefined) return undefined;
  return { policy: match[1]!, remaining: params.r, resetSeconds: params.t ?? 0 };
}
