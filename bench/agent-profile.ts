/**
 * Where the edge's CPU goes while agent tasks run: starts `npm start` with its V8 inspector, runs
 * `tasks` agent tasks of back-to-back `read_file` turns, takes a CPU profile of the edge's Worker
 * (its task objects run in the same isolate) for `seconds`, and prints the functions with the most
 * time, self and inclusive, as shares of the profile. The profile is written to `--out` for a viewer.
 *
 *   NODE_OPTIONS=--experimental-websocket npx tsx bench/agent-profile.ts [--tasks 16] [--seconds 10] [--out /tmp/agents.cpuprofile]
 *
 * (Node 20's WebSocket, which talks to the inspector, is behind that flag.)
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { AgentScript } from "../gpu-backends/simulator/agent-script.js";
import { setAgentScripts, startAgentStack } from "../test/support/agent-stack.js";
import { freePort } from "../test/support/local-edge.js";
import { inspect, summarize, type Profile } from "./profile.js";

const { values } = parseArgs({
  options: {
    tasks: { type: "string", default: "16" },
    seconds: { type: "string", default: "10" },
    out: { type: "string", default: "/tmp/agents.cpuprofile" },
  },
});

const FLOOD: AgentScript = {
  name: "profile-flood",
  match: "(agent profile flood)",
  turns: Array.from({ length: 400 }, () => ({ toolCalls: [{ name: "read_file", arguments: { path: "README.md" } }] })),
};

if (import.meta.url === `file://${process.argv[1]}`) {
  const inspector = await freePort();
  process.env.SEXTANT_INSPECTOR_PORT = String(inspector);
  const stack = await startAgentStack();
  try {
    await setAgentScripts(stack.edge, [FLOOD]);
    const worker = await inspect(inspector, (t) => / sextant$/.test(t) || t.endsWith("core:user:sextant"));
    const send = worker.send;
    const ids: string[] = [];
    for (let i = 0; i < Number(values.tasks); i++) {
      const { id } = await stack.sdk.agents.create({
        prompt: "Go (agent profile flood)",
        limits: { turns: 500, tokens: 50_000_000, wallSeconds: 3600 },
      });
      await stack.sdk.agents.uploadFiles(id, [{ path: "README.md", content: Buffer.from("# x\n").toString("base64") }]);
      await stack.sdk.agents.start(id);
      ids.push(id);
    }
    await new Promise((r) => setTimeout(r, 3000));
    const before = await Promise.all(ids.map(async (id) => (await stack.sdk.agents.get(id)).usage.turns));
    await send("Profiler.enable");
    await send("Profiler.setSamplingInterval", { interval: 200 });
    await send("Profiler.start");
    await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
    const { profile } = await send<{ profile: Profile }>("Profiler.stop");
    const after = await Promise.all(ids.map(async (id) => (await stack.sdk.agents.cancel(id)).usage.turns));
    worker.close();
    writeFileSync(values.out, JSON.stringify(profile));
    const turns = after.reduce((a, b) => a + b, 0) - before.reduce((a, b) => a + b, 0);
    console.log(`${ids.length} agent tasks, about ${turns} turns while profiled; profile in ${values.out}`);
    console.log(summarize(profile));
  } finally {
    await stack.edge.stop();
  }
}
