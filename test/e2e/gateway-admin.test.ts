import { createServer, type Server, type Socket } from "node:net";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { printGatewayStatus } from "../../client/cli/commands/admin.js";
import { main } from "../../client/cli/main.js";
import { EXIT } from "../../client/cli/output.js";
import type { EndpointStatus, GatewayStatus } from "../../protocol/gateway.js";
import { captureCli } from "../support/cli-capture.js";
import { LONDON, VIRGINIA, startGateway, until, type GatewayFixture } from "../support/gateway.js";
import { savedLocalEdge } from "../support/local-edge.js";

const EAST_SECRET = "sk-east-" + "e".repeat(32);
/** A prompt that must never reach the logs. */
const SECRET_PROMPT = "def reconcileBlackwaterLedger(entries):";

/**
 * `GET /admin/gateway` and `sextant admin gateway` against the real local edge, with simulated GPU
 * backends (stand-ins for vLLM) that fail and recover on cue: what the operator sees must follow
 * what the probes and real traffic found.
 */
describe("the gateway's operator view", () => {
  let gw: GatewayFixture;
  const output = captureCli();
  // A backend that accepts connections and never answers, for the probe's timeout.
  let silent: Server;
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    silent = createServer((socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const silentPort = (silent.address() as { port: number }).port;
    gw = await startGateway(
      [
        { id: "east", models: ["sim-coder"], ttftMs: 5, tokensPerSecond: 500 },
        { id: "west", models: ["sim-coder"], ttftMs: 5, tokensPerSecond: 500 },
      ],
      (urls) => ({
        pools: {
          tab: {
            role: "tab",
            models: ["tab-sim"],
            fim: "qwen2.5-coder",
            endpoints: [
              {
                id: "east",
                region: "us-east",
                ...VIRGINIA,
                url: urls.east!,
                model: "sim-coder",
                kind: "vllm",
                capacity: 8,
                secret: "EAST_KEY",
              },
              {
                id: "west",
                region: "eu-west",
                ...LONDON,
                url: urls.west!,
                model: "sim-coder",
                kind: "vllm",
                capacity: 4,
                weight: 2,
              },
            ],
            timeouts: { connectMs: 300, firstByteMs: 400, gapMs: 300, deadlineMs: 5_000 },
            recovery: { rampMs: 60_000, slowStartMs: 60_000 },
          },
          stuck: {
            role: "chat",
            models: ["chat-stuck"],
            endpoints: [
              {
                id: "silent",
                region: "us-east",
                ...VIRGINIA,
                url: `http://127.0.0.1:${silentPort}/v1`,
                kind: "openai",
                capacity: 1,
              },
            ],
          },
        },
        health: { probeIntervalMs: 200, probeTimeoutMs: 1_000, snapshotMaxAgeMs: 100, ejectionMs: 60_000 },
        // Long enough that a slow machine cannot end the interactive window between two requests.
        backgroundYield: { interactiveMs: 60_000 },
      }),
      { EAST_KEY: EAST_SECRET },
    );
  }, 120_000);
  afterAll(async () => {
    await gw?.stop();
    for (const socket of sockets) socket.destroy();
    silent?.close();
  });

  const status = () => gw.admin.gateway.status();
  const endpoint = (s: GatewayStatus, id: string) => s.endpoints.find((e) => e.id === id)!;
  const probed = (e: EndpointStatus, ok: boolean) => e.health.probe?.ok === ok;

  /** The Worker's structured log lines with this message. */
  const logged = (message: string) =>
    gw.edge
      .output()
      .split("\n")
      .filter((line) => line.includes(`"message":"${message}"`))
      .map((line) => JSON.parse(line.slice(line.indexOf("{"))) as Record<string, unknown>);

  async function complete() {
    return gw.openai().completions.create({ model: "tab-sim", prompt: "def add(a, b):", suffix: "\n", max_tokens: 4 });
  }

  it("lists the pool and its endpoints with their last probe, and names a secret without its value", async () => {
    const s = await until("every endpoint probed", async () => {
      const s = await status();
      const done = probed(endpoint(s, "east"), true) && probed(endpoint(s, "west"), true);
      return done && endpoint(s, "silent").health.probe ? s : undefined;
    });
    expect(s.source).toBe("GATEWAY_CONFIG");
    expect(s.pools).toEqual([
      { name: "tab", role: "tab", models: ["tab-sim"], down: false, ramp: null, endpoints: ["east", "west"] },
      { name: "stuck", role: "chat", models: ["chat-stuck"], down: true, ramp: null, endpoints: ["silent"] },
    ]);
    const west = endpoint(s, "west");
    expect(west).toMatchObject({
      region: "eu-west",
      kind: "vllm",
      url: gw.sim.backend("west").url,
      model: "sim-coder",
      capacity: 4,
      weight: 2,
      secret: null,
      health: { routable: true, ejectedUntil: null, since: null, slowStart: 1 },
      isolate: { inflight: 0, failures: 0, ejectedUntil: null, probation: false, fullUntil: null },
    });
    expect(west.health.probe).toMatchObject({ ok: true, status: 200, error: null });
    expect(endpoint(s, "east").secret).toBe("EAST_KEY");
    // A backend that never answers its health URL: the probe gives up after probeTimeoutMs.
    const stuck = endpoint(s, "silent");
    expect(stuck.health.routable).toBe(false);
    expect(stuck.health.probe).toMatchObject({ ok: false, status: null, error: "timeout" });
    expect(stuck.health.probe!.ms).toBeGreaterThanOrEqual(900);

    const raw = await fetch(`${gw.edge.baseURL}/admin/gateway`, {
      headers: { Authorization: `Bearer ${savedLocalEdge(gw.edge).adminSecret}` },
    });
    expect(raw.headers.get("Content-Type")).toMatch(/^application\/json/);
    expect(await raw.text()).not.toContain(EAST_SECRET);
  });

  it("lets background requests go at once while no interactive request is about, and in turn after one", async () => {
    const background = gw.openai({ defaultHeaders: { "X-Sextant-Priority": "background" } });
    const backgroundCompletion = () =>
      background.completions.create({ model: "tab-sim", prompt: "def sub(a, b):", suffix: "\n", max_tokens: 4 });
    const before = (await status()).backgroundYield!;
    expect(before).toMatchObject({ interactive: false, waiting: 0 });
    await backgroundCompletion();
    const quiet = (await status()).backgroundYield!;
    expect(quiet.bypassed).toBe(before.bypassed + 1);
    expect(quiet.admitted).toBe(before.admitted);

    await complete();
    await Promise.all([backgroundCompletion(), backgroundCompletion(), backgroundCompletion()]);
    const busy = (await status()).backgroundYield!;
    expect(busy).toMatchObject({ interactive: true, waiting: 0, bypassed: quiet.bypassed });
    // In turn, through the isolate's own timers: each took a place in line and left it.
    expect(busy.admitted).toBe(quiet.admitted + 3);

    const cli = (...args: string[]) =>
      main(["--base-url", gw.edge.baseURL, "--admin-secret", savedLocalEdge(gw.edge).adminSecret, ...args]);
    expect(await cli("admin", "gateway")).toBe(EXIT.ok);
    expect(output()).toMatch(
      /^Background yield \(the isolate that answered\): interactive traffic, background waits its turn; timers [\d.]+ ms late; 0 waiting; \d+ went at once, \d+ in turn \(\d+ held\)$/m,
    );
  });

  it("shows an endpoint failing its probes, then its slow start once it recovers", async () => {
    await gw.sim.backend("west").configure({ fault: { type: "unhealthy" } });
    const seen = await until("west's probes to fail", async () => {
      const s = await status();
      return probed(endpoint(s, "west"), false) ? s : undefined;
    });
    const failing = endpoint(seen, "west");
    // Each probe counts as soon as it answers: west's failure shows while the silent backend's probe
    // of the same round still waits for its timeout, whose last result is a round older.
    expect(Date.parse(endpoint(seen, "silent").health.probe!.at)).toBeLessThan(Date.parse(failing.health.probe!.at));
    expect(failing.health).toMatchObject({ routable: false, slowStart: 1 });
    expect(failing.health.probe).toMatchObject({ ok: false, status: 503, error: null });

    await gw.sim.backend("west").configure({ fault: { type: "none" } });
    const back = await until("west to come back", async () => {
      const west = endpoint(await status(), "west");
      return west.health.routable ? west : undefined;
    });
    expect(back.health.since).not.toBeNull();
    // A minute of slow start has only just begun.
    expect(back.health.slowStart).toBeGreaterThanOrEqual(0.1);
    expect(back.health.slowStart).toBeLessThan(0.5);
  });

  it("shows an ejection after real traffic failed on the nearest endpoint, in this isolate and shared", async () => {
    await gw.sim.backend("east").configure({ fault: { type: "status", status: 500 } });
    // Each request fails over to London and succeeds; the third failure in Virginia ejects it.
    for (let i = 0; i < 3; i++) expect((await complete()).choices[0]!.text).toBe("sim0 sim1 sim2 sim3 ");
    const east = await until("east's ejection to reach the health object", async () => {
      const east = endpoint(await status(), "east");
      return east.health.ejectedUntil ? east : undefined;
    });
    expect(east.health.routable).toBe(false);
    // The probes still pass (its health URL answers): the ejection, not a probe, took it out.
    expect(east.health.probe?.ok).toBe(true);
    expect(east.isolate).toMatchObject({ probation: true, inflight: 0 });
    expect(Date.parse(east.isolate.ejectedUntil!)).toBeGreaterThan(Date.now() + 30_000);

    printGatewayStatus(await status());
    const line = output()
      .split("\n")
      .find((l) => l.startsWith("east "))!;
    expect(line).toMatch(/ejected until \d\d:\d\d:\d\d/);
    expect(line).toMatch(/on probation/);
    expect(line).toMatch(/EAST_KEY\s*$/);
    // The ejection is in the Worker's log, with the reason but nothing the backend said.
    await until("the log line", () => logged("endpoint ejected").at(-1));
    expect(logged("endpoint ejected")).toEqual([
      expect.objectContaining({ level: "warn", endpoint: "east", reason: "status 500", requestId: expect.any(String) }),
    ]);
    await gw.sim.backend("east").configure({ fault: { type: "none" } });
  });

  it("logs a request that no backend answered and a stream that broke, with reasons and no content", async () => {
    // East is still ejected: west alone serves the pool.
    await gw.sim.backend("west").configure({ fault: { type: "status", status: 502 } });
    const refused = await complete().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect(await until("the log line", () => logged("no backend answered").at(-1))).toMatchObject({
      pool: "tab",
      code: "upstream_failure",
      attempts: 1,
      failures: [{ endpoint: "west", reason: "status 502" }],
    });

    await gw.sim.backend("west").configure({ fault: { type: "hangMidStream", afterTokens: 2 } });
    const stream = await gw
      .openai()
      .completions.create({ model: "tab-sim", prompt: SECRET_PROMPT, max_tokens: 8, stream: true });
    const broke = await (async () => {
      for await (const _ of stream) void _;
    })().catch((err: unknown) => err as Error);
    expect(broke).toBeInstanceOf(Error);
    // The log reaches the edge's output through a pipe, a moment after the client's answer.
    expect(await until("the log line", () => logged("stream broke").at(-1))).toMatchObject({
      pool: "tab",
      endpoint: "west",
      reason: "gap-timeout",
      events: 2,
      resumedOn: null,
    });
    await gw.sim.backend("west").configure({ fault: { type: "none" } });
    expect(gw.edge.output()).not.toContain("Blackwater");
  });

  it("shows a pool down, then its recovery ramp, through `sextant admin gateway`", async () => {
    for (const id of ["east", "west"]) await gw.sim.backend(id).configure({ fault: { type: "unhealthy" } });
    await until("the pool to go down", async () => ((await status()).pools[0]!.down ? true : undefined));
    for (const id of ["east", "west"]) await gw.sim.backend(id).configure({ fault: { type: "none" } });
    const pool = await until("the ramp to start", async () => (await status()).pools[0]!.ramp ?? undefined);
    expect(pool.admitted).toBeGreaterThanOrEqual(0);
    expect(pool.admitted).toBeLessThan(0.5);
    expect(Date.parse(pool.endsAt) - Date.parse(pool.startedAt)).toBe(60_000);

    const cli = (...args: string[]) =>
      main(["--base-url", gw.edge.baseURL, "--admin-secret", savedLocalEdge(gw.edge).adminSecret, ...args]);
    expect(await cli("admin", "gateway")).toBe(EXIT.ok);
    const text = output();
    expect(text).toMatch(/configured by GATEWAY_CONFIG, probes every 0\.2 s/);
    expect(text).toMatch(/^tab\s+tab\s+tab-sim\s+recovering: \d+% of free users until \d\d:\d\d:\d\d\s+east, west$/m);
    expect(text).toMatch(
      /^west\s+eu-west\s+vllm\s+sim-coder\s+0\/4\s+.*slow start \d+%\s+200 in [\d.]+ ms, \d+ s ago\s+-$/m,
    );

    const before = output().length;
    expect(await cli("--json", "admin", "gateway")).toBe(EXIT.ok);
    const json = JSON.parse(output().slice(before)) as GatewayStatus;
    expect(json.pools[0]!.ramp).not.toBeNull();
  });

  it("refuses without the admin secret, with a wrong one and with an API key", async () => {
    const url = `${gw.edge.baseURL}/admin/gateway`;
    const none = await fetch(url);
    expect(none.status).toBe(401);
    expect(none.headers.get("Content-Type")).toMatch(/^application\/problem\+json/);
    expect(((await none.json()) as { code: string }).code).toBe("unauthenticated");
    for (const token of ["x".repeat(40), gw.apiKey]) {
      const refused = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as { code: string }).code).toBe("forbidden");
    }
  });
});
