import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * What the Workers runtime does with the streams a relay could use, pinned because the gateway's
 * relay is built on it (docs/gateway.md, "How requests are routed": why streams are relayed in
 * JavaScript): the backend's body cannot be piped natively into the response and still be
 * followed by an error event, and a response stream that errors ends the client's body as if it
 * were whole. If a runtime update changes either, these fail, and a native relay becomes possible.
 */
const WORKER = `
export default {
  async fetch(request, env, ctx) {
    const mode = new URL(request.url).searchParams.get("mode");
    const encoder = new TextEncoder();
    if (mode === "pipe-between-transforms") {
      const first = new IdentityTransformStream();
      const second = new IdentityTransformStream();
      try {
        const piping = first.readable.pipeTo(second.writable);
        const writer = first.writable.getWriter();
        await writer.write(encoder.encode("x"));
        await writer.close();
        await piping;
        return new Response("piped");
      } catch (err) {
        return new Response(String(err && err.message), { status: 500 });
      }
    }
    const { readable, writable } = new IdentityTransformStream();
    const writer = writable.getWriter();
    ctx.waitUntil((async () => {
      await writer.write(encoder.encode("data: one\\n\\n"));
      if (mode === "abort") await writer.abort(new Error("the backend broke")).catch(() => {});
      else await writer.close();
    })());
    return new Response(readable, { headers: { "content-type": "text/event-stream" } });
  },
};`;

describe("the Workers runtime's streams, as the gateway relay relies on them", () => {
  let mf: Miniflare;
  let url: URL;

  beforeAll(async () => {
    mf = new Miniflare({ modules: true, script: WORKER, compatibilityDate: "2026-05-01", port: 0 });
    url = await mf.ready;
  }, 60_000);
  afterAll(async () => {
    await mf?.dispose();
  });

  it("cannot pipe one IdentityTransformStream into another", async () => {
    // The pipe never completes ("Inter-TransformStream ReadableStream.pipeTo() is not implemented"
    // is thrown where nothing can catch it), and the runtime cancels the request as hung.
    const response = await fetch(new URL("/?mode=pipe-between-transforms", url));
    expect(response.status).toBe(500);
    expect(await response.text()).not.toBe("piped");
  });

  it("ends the client's body as if it were whole when the response stream errors", async () => {
    const whole = await (await fetch(new URL("/?mode=close", url))).text();
    const broken = await (await fetch(new URL("/?mode=abort", url))).text();
    expect(broken).toBe(whole);
  });
});
