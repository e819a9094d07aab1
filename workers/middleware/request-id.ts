import { createMiddleware } from "hono/factory";
import { isRequestId, REQUEST_ID_HEADER } from "../../protocol/request-id.js";
import type { AppEnv } from "../app-env.js";

/**
 * The one place a request gets its id: the client's own when it is well-formed (`REQUEST_ID`),
 * else a fresh UUID. Every record, log line and problem of the request names it, and it is set on
 * the response once the rest of the app has answered, whatever built that response: `c.json`,
 * the error and not-found handlers, or a `Response` a route made itself (the gateway's relayed
 * streams), whose headers Hono's prepared headers never reach. Nothing of a response is sent
 * before this runs, so a stream's first byte already goes out after the header.
 */
export const requestId = createMiddleware<AppEnv>(async (c, next) => {
  const sent = c.req.header(REQUEST_ID_HEADER);
  const id = isRequestId(sent) ? sent : crypto.randomUUID();
  c.set("requestId", id);
  await next();
  try {
    c.res.headers.set(REQUEST_ID_HEADER, id);
  } catch {
    // Immutable headers (a response passed on from `fetch`): Hono copies the response, handing its
    // body over unread, and sets the header on the copy.
    c.header(REQUEST_ID_HEADER, id);
  }
});
