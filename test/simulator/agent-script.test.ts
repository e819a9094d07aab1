import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadAgentScripts, type AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { startSimulator, type Simulator } from "../../gpu-backends/simulator/simulator.js";

const SCRIPT: AgentScript = {
  name: "fix it",
  match: "(script: fix-it)",
  turns: [
    {
      content: "Reading.",
      toolCalls: [
        { name: "read_file", arguments: { path: "a.js" } },
        { name: "grep", arguments: { pattern: "TODO" } },
      ],
    },
    { toolCalls: [{ name: "finish", arguments: { summary: "done" } }] },
  ],
};
const TOOLS = ["read_file", "grep", "finish"].map((name) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: { path: { type: "string" } } } },
}));

let sim: Simulator;
let client: OpenAI;
beforeAll(async () => {
  sim = await startSimulator({ backends: [{ id: "a", models: ["m"], agentScripts: [SCRIPT], ttftMs: 1 }] });
  client = new OpenAI({ baseURL: sim.backend("a").url, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => sim?.stop());

const user = (content: string) => ({ role: "user" as const, content });
const afterFirstTurn = [
  user("Please fix it (script: fix-it)"),
  {
    role: "assistant" as const,
    content: "Reading.",
    tool_calls: [{ id: "x", type: "function" as const, function: { name: "read_file", arguments: "{}" } }],
  },
  { role: "tool" as const, tool_call_id: "x", content: "{}" },
];

describe("the scripted agent model", () => {
  it("answers a matching conversation's first turn with the script's calls, whole", async () => {
    const answer = await client.chat.completions.create({
      model: "m",
      messages: [{ role: "system", content: "be an agent" }, user("Please fix it (script: fix-it)")],
      tools: TOOLS,
    });
    const message = answer.choices[0]!.message;
    expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
    expect(answer.system_fingerprint).toBe("sextant-simulator");
    expect(message.content).toBe("Reading.");
    expect(message.tool_calls!.map((c) => [c.id, c.type === "function" && c.function.name])).toEqual([
      ["call_fix_it_0_0", "read_file"],
      ["call_fix_it_0_1", "grep"],
    ]);
    expect(message.tool_calls!.map((c) => c.type === "function" && JSON.parse(c.function.arguments))).toEqual([
      { path: "a.js" },
      { pattern: "TODO" },
    ]);
  });

  it("streams the same turn, as the SDK assembles it", async () => {
    const stream = client.chat.completions.stream({
      model: "m",
      messages: [user("Please fix it (script: fix-it)")],
      tools: TOOLS,
      stream_options: { include_usage: true },
    });
    const answer = await stream.finalChatCompletion();
    expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
    expect(answer.choices[0]!.message.tool_calls!.map((c) => c.type === "function" && c.function.arguments)).toEqual([
      '{"path":"a.js"}',
      '{"pattern":"TODO"}',
    ]);
    expect(answer.usage!.total_tokens).toBeGreaterThan(0);
  });

  it("plays the turn after the assistant messages already there, the same every time", async () => {
    const ask = () => client.chat.completions.create({ model: "m", messages: afterFirstTurn, tools: TOOLS });
    const [a, b] = await Promise.all([ask(), ask()]);
    for (const answer of [a, b]) {
      const call = answer.choices[0]!.message.tool_calls![0]!;
      expect(call.id).toBe("call_fix_it_1_0");
      expect(call.type === "function" && [call.function.name, call.function.arguments]).toEqual([
        "finish",
        '{"summary":"done"}',
      ]);
    }
  });

  it("says in text when the script has no more turns", async () => {
    const messages = [...afterFirstTurn, { role: "assistant" as const, content: "x" }, user("and now?")];
    const answer = await client.chat.completions.create({ model: "m", messages, tools: TOOLS });
    expect(answer.choices[0]!.finish_reason).toBe("stop");
    expect(answer.choices[0]!.message.content).toBe("(simulated agent: script fix it has no turn 2)");
  });

  it("answers as the ordinary simulator when no script matches, or when tools are off", async () => {
    const other = await client.chat.completions.create({ model: "m", messages: [user("something else")] });
    expect(other.choices[0]!.message.content).toMatch(/^sim0 /);
    const none = await client.chat.completions.create({
      model: "m",
      messages: [user("Please fix it (script: fix-it)")],
      tools: TOOLS,
      tool_choice: "none",
    });
    expect(none.choices[0]!.message.tool_calls ?? []).toEqual([]);
  });

  it("loads a directory of scripts, and names a file that is not one", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-scripts-"));
    writeFileSync(join(dir, "a.json"), JSON.stringify(SCRIPT));
    expect(loadAgentScripts(dir)).toEqual([SCRIPT]);
    writeFileSync(join(dir, "b.json"), JSON.stringify({ name: "x", match: "y", turns: [{}] }));
    expect(() => loadAgentScripts(dir)).toThrow(/b\.json is not an agent script/);
    writeFileSync(join(dir, "b.json"), "{");
    expect(() => loadAgentScripts(dir)).toThrow(/b\.json is not JSON/);
  });

  it("takes new scripts at run time", async () => {
    await sim.backend("a").configure({ agentScripts: [{ ...SCRIPT, match: "(script: other)" }] });
    const answer = await client.chat.completions.create({
      model: "m",
      messages: [user("Please (script: other)")],
      tools: TOOLS,
    });
    expect(answer.choices[0]!.message.tool_calls![0]!.id).toBe("call_fix_it_0_0");
    await sim.backend("a").configure({ agentScripts: [SCRIPT] });
  });

  it("ships scripts that all load", () => {
    expect(
      loadAgentScripts(join(import.meta.dirname, "../../gpu-backends/simulator/agent-scripts")).length,
    ).toBeGreaterThanOrEqual(11);
  });
});
