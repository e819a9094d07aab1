/**
 * The request id: every response carries one in `X-Request-Id`, the edge's own records and logs
 * name the request by it, and editor events quote it to join the two.
 */
export const REQUEST_ID_HEADER = "X-Request-Id";

/**
 * A client's own request id that the edge keeps instead of minting one: 1 to 64 letters, digits
 * and `_ . : -`. Wide enough for the ids clients actually send (UUIDs, ULIDs, OpenAI's `req_…`,
 * W3C trace ids and traceparents, `service:uuid`, `bench-…` prefixes), narrow enough that the id
 * goes into a response header, a JSON log line, a Parquet column, a problem's `instance` and a
 * backend's request headers without escaping: no spaces, quotes, commas, semicolons, slashes, `%`
 * or control characters, so it cannot split a header, forge a log line or smuggle a list. Editor
 * events quote the same ids (protocol/events.ts), so every id the edge answers with can join an
 * event to its request; the length bounds what a client can make the edge or an event store.
 */
export const REQUEST_ID = /^[A-Za-z0-9_.:-]{1,64}$/;

export function isRequestId(value: string | null | undefined): value is string {
  return typeof value === "string" && REQUEST_ID.test(value);
}
