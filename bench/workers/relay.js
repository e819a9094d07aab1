/**
 * A Worker that relays a stream in JavaScript and does nothing else: each upstream event is read,
 * parsed, renamed to MODEL and written on, the least a Worker does that looks at every event (for
 * usage, errors or stalls). The gateway overhead benchmark runs it beside the edge and the Worker
 * that only forwards, so that the cost of touching each event in JavaScript on this runtime and
 * machine is measured apart from the gateway's own. It writes into a runtime-native stream, as the
 * edge does.
 */
const encoder = new TextEncoder();

export default {
  async fetch(request, env, ctx) {
    const { pathname, search } = new URL(request.url);
    const upstream = await fetch(`${env.UPSTREAM}${pathname.replace(/^\/v1/, "")}${search}`, {
      method: request.method,
      headers: {
        "content-type": request.headers.get("content-type") ?? "application/json",
        "x-request-id": request.headers.get("x-request-id") ?? crypto.randomUUID(),
      },
      body: request.body,
    });
    if (!upstream.body) return upstream;
    const { readable, writable } = new IdentityTransformStream();
    const writer = writable.getWriter();
    const reader = upstream.body.getReader();
    const decoder = new TextDecoder();
    const relay = async () => {
      let buffer = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let out = "";
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = event.startsWith("data: ") ? event.slice(6) : undefined;
          if (data === undefined || data === "[DONE]") {
            out += `${event}\n\n`;
            continue;
          }
          const parsed = JSON.parse(data);
          parsed.model = env.MODEL;
          out += `data: ${JSON.stringify(parsed)}\n\n`;
        }
        if (out) await writer.write(encoder.encode(out));
      }
      await writer.close();
    };
    ctx.waitUntil(relay().catch((err) => writer.abort(err).catch(() => {})));
    return new Response(readable, {
      status: upstream.status,
      headers: { "content-type": upstream.headers.get("content-type") ?? "text/event-stream" },
    });
  },
};
