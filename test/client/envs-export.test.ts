/**
 * Captured rollouts out of the lake: their Parquet as DuckDB reads it (every column typed, no
 * conversation text in the clear), and `sextant envs keygen` / `sextant envs export` turning the
 * org's rows into TRL conversational JSON lines and Harbor ATIF trajectories with its private key.
 * The edge's rows route is a stand-in here (its own test is test/worker/envs-capture.test.ts).
 */
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { main } from "../../client/cli/main.js";
import { EXIT } from "../../client/cli/output.js";
import { encodeRows } from "../../durable-objects/lake/parquet.js";
import { generateApiKey } from "../../protocol/api-key.js";
import { fromBase64url } from "../../protocol/base64.js";
import { modelStepRow, rolloutRows, type Message, type RolloutSummary } from "../../protocol/envs/rollout-rows.js";
import { partitionOf, type LakeRow } from "../../protocol/lake.js";
import { captureCli } from "../support/cli-capture.js";
import { duckQuery } from "../support/duckdb.js";

const SECRET = "make checkout() in src/billing/secret-ledger.ts round half-even";
const startedAt = Date.UTC(2026, 11, 7, 9, 30);

const messages: Message[] = [
  { role: "system", content: "You are Sextant's agent." },
  { role: "user", content: SECRET },
  {
    role: "assistant",
    content: "Reading it first.",
    tool_calls: [
      {
        id: "call_a",
        type: "function",
        function: { name: "read_file", arguments: '{"path":"src/billing/secret-ledger.ts"}' },
      },
    ],
  },
  { role: "tool", tool_call_id: "call_a", content: "export const checkout = (x) => Math.round(x);" },
  { role: "assistant", content: "Done." },
];

function summary(orgId: string, rolloutId: string, reward: number, advantage: number): RolloutSummary {
  return {
    orgId,
    rolloutId,
    runId: "run_export",
    startedAt,
    member: 0,
    groupIndex: 0,
    task: { sha256: "b".repeat(64), index: 1 },
    seed: 3,
    policy: "agent-simulated",
    checkpoint: null,
    reward,
    components: { tests: reward },
    advantage,
    outcome: "finished",
    turns: 2,
    toolCalls: 1,
    promptTokens: 900,
    completionTokens: 12,
    endedAt: startedAt + 30_000,
  };
}

/** The key file `keygen` wrote, as the sealing side sees it. */
const publicKeyOf = (file: string) => {
  const parsed = JSON.parse(readFileSync(file, "utf8")) as { keyId: string; publicKey: string };
  return { keyId: parsed.keyId, publicKey: fromBase64url(parsed.publicKey) };
};

async function rowsFor(keyFile: string, orgId: string) {
  const key = publicKeyOf(keyFile);
  const s = summary(orgId, "task_export_one", 1, 0.7);
  const captured = await modelStepRow(
    s,
    {
      turn: 2,
      at: startedAt + 20_000,
      model: "agent-simulated",
      message: messages[4] as Message & { role: "assistant" },
      finishReason: "stop",
      promptTokens: 480,
      completionTokens: 2,
      latencyMs: 900,
      logprobs: [
        { token: "token_id:11", logprob: -0.5, bytes: null, top_logprobs: [] },
        { token: "token_id:12", logprob: -0.25, bytes: null, top_logprobs: [] },
      ],
      tokenIds: [11, 12],
      promptTokenIds: [1, 2, 3, 4],
    },
    key,
  );
  const first = await rolloutRows({ summary: s, conversation: messages, key });
  const second = await rolloutRows({
    summary: summary(orgId, "task_export_two", 0, -0.7),
    conversation: messages.slice(0, 3),
    key,
  });
  // As the lake keeps them: the gateway's capture of turn 2 in place of the end's copy.
  const steps = [
    ...first.rollout_steps.filter((r) => r.step_id !== captured.step_id),
    captured,
    ...second.rollout_steps,
  ];
  return { rollouts: [...first.rollouts, ...second.rollouts], steps };
}

describe("captured rollouts for training", () => {
  const stdout = captureCli();

  it("keygen writes the private key 0600 and never over an existing file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sextant-keys-"));
    const file = join(dir, "org.key.json");
    expect(await main(["--json", "envs", "keygen", "--out", file, "--no-register"])).toBe(EXIT.ok);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const printed = JSON.parse(stdout()) as { keyId: string; publicKey: string; registered: boolean };
    expect(printed.registered).toBe(false);
    expect(publicKeyOf(file).keyId).toBe(printed.keyId);
    expect(JSON.stringify(printed)).not.toContain('"d"');
    const before = readFileSync(file, "utf8");
    expect(await main(["envs", "keygen", "--out", file, "--no-register"])).toBe(EXIT.usage);
    expect(readFileSync(file, "utf8")).toBe(before);
  });

  it("are Parquet DuckDB reads with the conversation only sealed, and export as TRL lines and ATIF trajectories", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sextant-export-"));
    const keyFile = join(dir, "org.key.json");
    expect(await main(["envs", "keygen", "--out", keyFile, "--no-register"])).toBe(EXIT.ok);
    const { rollouts, steps } = await rowsFor(keyFile, "org_export");

    const rolloutsFile = join(dir, "rollouts.parquet");
    const stepsFile = join(dir, "rollout_steps.parquet");
    writeFileSync(rolloutsFile, new Uint8Array(encodeRows("rollouts", rollouts)));
    writeFileSync(stepsFile, new Uint8Array(encodeRows("rollout_steps", steps)));
    for (const file of [rolloutsFile, stepsFile])
      for (const text of ["secret-ledger", "half-even", "Math.round", "Reading it first", "You are Sextant"])
        expect(readFileSync(file).includes(text)).toBe(false);
    const joined = await duckQuery(`
      SELECT r.rollout_id, r.reward, r.advantage, r.task_index, count(s.step_id) AS steps,
             count(*) FILTER (WHERE s.kind = 'tool') AS tools, bool_or(s.has_logprobs) AS logprobs
      FROM read_parquet('${rolloutsFile}') r JOIN read_parquet('${stepsFile}') s USING (rollout_id)
      GROUP BY ALL ORDER BY r.rollout_id`);
    expect(joined).toEqual([
      { rollout_id: "task_export_one", reward: 1, advantage: 0.7, task_index: 1, steps: 3, tools: 1, logprobs: true },
      { rollout_id: "task_export_two", reward: 0, advantage: -0.7, task_index: 1, steps: 1, tools: 0, logprobs: false },
    ]);

    // The edge's rows route, answered from what DuckDB read back, for the hour the rollouts started.
    const served = {
      rollouts: await duckQuery(`SELECT * FROM read_parquet('${rolloutsFile}')`),
      rollout_steps: await duckQuery(`SELECT * FROM read_parquet('${stepsFile}')`),
    };
    const { day, hour } = partitionOf("rollouts", startedAt);
    const asked: string[] = [];
    vi.stubGlobal("fetch", async (input: RequestInfo | URL) => {
      const url = new URL(String(input));
      asked.push(`${url.pathname}?${url.searchParams}`);
      const table = url.pathname.split("/").at(-1) as keyof typeof served;
      const own = url.searchParams.get("hour") === hour && url.searchParams.get("run") === "run_export";
      const rows = (own ? served[table] : []).map((r) =>
        Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v instanceof Date ? v.getTime() : v])),
      ) as LakeRow[];
      return new Response(JSON.stringify({ table, day, hour: url.searchParams.get("hour"), rows }), {
        headers: { "Content-Type": "application/json" },
      });
    });
    const out = join(dir, "out");
    const args = ["--base-url", "http://edge.test", "--api-key", generateApiKey()];
    const code = await main([
      ...args,
      "envs",
      "export",
      "--out",
      out,
      "--key",
      keyFile,
      "--run",
      "run_export",
      "--day",
      day,
    ]);
    expect(code).toBe(EXIT.ok);
    expect(asked).toHaveLength(48);
    expect(asked).toContain(`/v1/envs/rows/rollout_steps?day=${day}&hour=${hour}&run=run_export`);

    const lines = readFileSync(join(out, "trl.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toEqual({
      prompt: messages.slice(0, 2),
      completion: messages.slice(2),
      reward: 1,
      advantage: 0.7,
      components: { tests: 1 },
      outcome: "finished",
      rollout_id: "task_export_one",
      run_id: "run_export",
      task_sha256: "b".repeat(64),
      task_index: 1,
      seed: 3,
      policy: "agent-simulated",
      checkpoint: null,
    });
    expect(lines[1]).toMatchObject({ prompt: messages.slice(0, 2), completion: [messages[2]], reward: 0 });

    const atif = JSON.parse(readFileSync(join(out, "atif", "task_export_one.json"), "utf8")) as {
      schema_version: string;
      session_id: string;
      agent: { name: string; version: string; model_name: string };
      steps: Record<string, unknown>[];
      final_metrics: { total_steps: number; extra: { reward: number } };
    };
    expect(atif).toMatchObject({
      schema_version: "ATIF-v1.4",
      session_id: "task_export_one",
      agent: { name: "sextant", model_name: "agent-simulated" },
      final_metrics: {
        total_steps: 4,
        total_prompt_tokens: 480,
        total_completion_tokens: 2,
        extra: { reward: 1, advantage: 0.7 },
      },
    });
    expect(atif.steps.map((s) => [s.step_id, s.source])).toEqual([
      [1, "system"],
      [2, "user"],
      [3, "agent"],
      [4, "agent"],
    ]);
    expect(atif.steps[1]!.message).toBe(SECRET);
    expect(atif.steps[2]).toMatchObject({
      message: "Reading it first.",
      tool_calls: [
        { tool_call_id: "call_a", function_name: "read_file", arguments: { path: "src/billing/secret-ledger.ts" } },
      ],
      observation: { results: [{ source_call_id: "call_a", content: messages[3]!.content }] },
    });
    expect(atif.steps[3]).toMatchObject({
      message: "Done.",
      metrics: {
        prompt_tokens: 480,
        completion_tokens: 2,
        completion_token_ids: [11, 12],
        logprobs: [-0.5, -0.25],
        prompt_token_ids: [1, 2, 3, 4],
      },
    });

    // Another org's key opens nothing.
    const other = join(dir, "other.key.json");
    expect(await main(["envs", "keygen", "--out", other, "--no-register"])).toBe(EXIT.ok);
    expect(
      await main([
        ...args,
        "envs",
        "export",
        "--out",
        join(dir, "x"),
        "--key",
        other,
        "--run",
        "run_export",
        "--day",
        day,
        "--hour",
        hour,
      ]),
    ).not.toBe(EXIT.ok);
  });
});
