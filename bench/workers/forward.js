/**
 * A Worker that only forwards: each request goes to UPSTREAM with the same method, body and
 * content type, and the upstream response comes back as it is, streamed by the runtime without
 * any JavaScript per chunk. The gateway overhead benchmark runs it beside the edge, in the same
 * way, as the floor that any Worker in front of a backend pays on the machine it runs on.
 */
export default {
  async fetch(request, env) {
    const { pathname, search } = new URL(request.url);
    return fetch(`${env.UPSTREAM}${pathname.replace(/^\/v1/, "")}${search}`, {
      method: request.method,
      headers: {
        "content-type": request.headers.get("content-type") ?? "application/json",
        "x-request-id": request.headers.get("x-request-id") ?? crypto.randomUUID(),
      },
      body: request.body,
    });
  },
};
