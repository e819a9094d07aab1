/**
 * Capture for training at the edge: the org's sealing key routes, and a rollout's rows through the
 * records queue into the lake exactly once, whoever sends them and however often the queue delivers
 * them again, read back by the org alone, and never in the clear in the lake's bucket.
 */
import { createExecutionContext, createMessageBatch, env, getQueueResult, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { toBase64url } from "../../protocol/base64.js";
import { OrgKey, RowsAnswer } from "../../protocol/envs/capture.js";
import { rolloutRows, type Message, type OrgSealKey, type RolloutSummary } from "../../protocol/envs/rollout-rows.js";
import { generateOrgKeyPair, importPrivateKey, openJson } from "../../protocol/envs/seal.js";
import { partitionName, partitionOf, type LakeMessage, type LakeRow } from "../../protocol/lake.js";
import { readOrgSealKey } from "../../durable-objects/lake/org-seal-key.js";
import worker from "../../workers/index.js";
import { captureCall, capturedCall } from "../../workers/envs/capture.js";
import { call, createAccount, expectJson, expectProblem } from "./harness.js";

const SECRET = "refactor src/vault/secret-ledger.ts so the overdraft test passes";

async function registeredKey(token: string) {
  const pair = await generateOrgKeyPair();
  const answer = await expectJson(
    await call("/v1/envs/keys", { method: "PUT", token, body: { publicKey: toBase64url(pair.publicKey) } }),
    200,
    OrgKey,
  );
  return { pair, answer };
}

describe("the org's sealing key", () => {
  it("is set by an owner, read by any member, replaced by an owner, and is no other org's", async () => {
    const owner = await createAccount();
    const member = await createAccount({ role: "member", org: owner.org });
    await expectProblem(await call("/v1/envs/keys", { token: owner.key.key }), 404, "not_found");
    const { pair, answer } = await registeredKey(owner.key.key);
    // The default id is the key's fingerprint: the same key, the same id.
    expect(answer.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(answer.publicKey).toBe(toBase64url(pair.publicKey));
    expect(await expectJson(await call("/v1/envs/keys", { token: member.key.key }), 200, OrgKey)).toEqual(answer);

    const next = await generateOrgKeyPair();
    const body = { publicKey: toBase64url(next.publicKey), keyId: "team-2026" };
    await expectProblem(await call("/v1/envs/keys", { method: "PUT", token: member.key.key, body }), 403, "forbidden");
    const replaced = await expectJson(
      await call("/v1/envs/keys", { method: "PUT", token: owner.key.key, body }),
      200,
      OrgKey,
    );
    expect(replaced.keyId).toBe("team-2026");
    // As objects read it to seal a rollout's rows.
    expect(await readOrgSealKey(env.DB, owner.org.id)).toEqual({ keyId: "team-2026", publicKey: next.publicKey });
    expect((await expectJson(await call("/v1/envs/keys", { token: member.key.key }), 200, OrgKey)).keyId).toBe(
      "team-2026",
    );

    const stranger = await createAccount();
    await expectProblem(await call("/v1/envs/keys", { token: stranger.key.key }), 404, "not_found");
    // Only the public key is stored: a row has no column that could hold a private one.
    const columns = await env.DB.prepare("SELECT name FROM pragma_table_info('org_seal_keys')").all<{ name: string }>();
    expect(columns.results.map((c) => c.name).sort()).toEqual([
      "created_at",
      "key_id",
      "org_id",
      "public_key",
      "user_id",
    ]);
  });

  it("refuses what is not a raw 32-byte X25519 public key, and a bad key id", async () => {
    const owner = await createAccount();
    const put = (body: unknown) => call("/v1/envs/keys", { method: "PUT", token: owner.key.key, body });
    const pair = await generateOrgKeyPair();
    for (const body of [
      {},
      { publicKey: toBase64url(new Uint8Array(32)) },
      { publicKey: toBase64url(pair.publicKey.subarray(0, 31)) },
      { publicKey: toBase64url(new Uint8Array(64).fill(9)) },
      { publicKey: JSON.stringify(pair.privateJwk) },
      { publicKey: toBase64url(pair.publicKey), keyId: "a/b" },
      { publicKey: toBase64url(pair.publicKey), privateKey: pair.privateJwk },
    ])
      await expectProblem(await put(body), 400, "invalid_request");
  });
});

const HOUR = 3_600_000;

function conversation(): Message[] {
  return [
    { role: "system", content: "You are Sextant's agent." },
    { role: "user", content: SECRET },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        {
          id: "call_1",
          type: "function",
          function: { name: "read_file", arguments: '{"path":"src/vault/secret-ledger.ts"}' },
        },
        { id: "call_2", type: "function", function: { name: "run_command", arguments: '{"command":"npm test"}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: "export function overdraft() { return SECRET_BALANCE; }" },
    { role: "tool", tool_call_id: "call_2", content: "1 failing: overdraft" },
    { role: "assistant", content: "Fixed the overdraft in secret-ledger." },
  ];
}

/** Delivers `messages` to the consumer, again and again while it asks for any again, as the queue would. */
async function deliver(messages: LakeMessage[], faults: string): Promise<number> {
  let pending = messages.map((body, i) => ({
    id: `msg-${crypto.randomUUID()}-${i}`,
    timestamp: new Date(),
    attempts: 1,
    body,
  }));
  const faulty = { ...env, LAKE_FAULT_EVERY: faults } as unknown as Env;
  let redelivered = 0;
  for (let round = 0; pending.length && round < 20; round++) {
    const batch = createMessageBatch("sextant-records", pending);
    const ctx = createExecutionContext();
    await worker.queue(batch, faulty);
    const result = await getQueueResult(batch, ctx);
    const again = new Set(result.retryMessages.map((m: { msgId: string }) => m.msgId));
    if (result.retryBatch.retry) for (const m of pending) again.add(m.id);
    redelivered += again.size;
    pending = pending.filter((m) => again.has(m.id)).map((m) => ({ ...m, attempts: m.attempts + 1 }));
  }
  expect(pending).toEqual([]);
  return redelivered;
}

async function bucketText(prefix: string): Promise<string> {
  let text = "";
  let cursor: string | undefined;
  do {
    const page = await env.LAKE.list({ prefix, cursor });
    for (const o of page.objects)
      text += new TextDecoder("latin1").decode(await (await env.LAKE.get(o.key))!.arrayBuffer());
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return text;
}

describe("a rollout's rows", () => {
  it("land once each through repeated sends and forced redeliveries; the gateway's capture of a call wins; only the org reads them", async () => {
    const owner = await createAccount();
    const { pair, answer } = await registeredKey(owner.key.key);
    const key: OrgSealKey = { keyId: answer.keyId, publicKey: pair.publicKey };
    const startedAt = Date.now() - 20 * HOUR;
    const summary: RolloutSummary = {
      orgId: owner.org.id,
      rolloutId: `task_${crypto.randomUUID().replaceAll("-", "").slice(0, 20)}`,
      runId: "run_capture_test",
      startedAt,
      member: 0,
      groupIndex: 0,
      task: { sha256: "a".repeat(64), index: 3 },
      seed: 7,
      policy: "agent-simulated",
      checkpoint: "step-100",
      reward: 1,
      components: { tests: 1 },
      advantage: 0.5,
      outcome: "finished",
      turns: 2,
      toolCalls: 2,
      promptTokens: 1200,
      completionTokens: 40,
      endedAt: startedAt + 90_000,
    };
    const messages = conversation();
    // The gateway's capture of turn 2, with what the simulator answers for logprobs and token ids.
    const tag = { rolloutId: summary.rolloutId, runId: summary.runId, turn: 2, startedAt };
    const answerBody = {
      model: "agent-simulated",
      prompt_token_ids: [1, 2, 3],
      usage: { prompt_tokens: 600, completion_tokens: 7 },
      choices: [
        {
          message: messages[5],
          finish_reason: "stop",
          logprobs: { content: [{ token: "token_id:42", logprob: -0.25, bytes: [], top_logprobs: [] }] },
        },
      ],
    };
    expect(
      capturedCall(tag, { model: "agent-simulated" }, answerBody, startedAt + 60_000, startedAt + 61_000),
    ).toMatchObject({ turn: 2, tokenIds: [42], promptTokenIds: [1, 2, 3], latencyMs: 1000 });
    const rows = await rolloutRows({ summary, conversation: messages, key });
    expect(rows.rollouts).toHaveLength(1);
    expect(rows.rollout_steps.map((r) => r.step_id)).toEqual([
      `${summary.rolloutId}.m1`,
      `${summary.rolloutId}.t1.0`,
      `${summary.rolloutId}.t1.1`,
      `${summary.rolloutId}.m2`,
    ]);
    for (const row of [...rows.rollouts, ...rows.rollout_steps])
      expect(JSON.stringify(row)).not.toMatch(/secret|overdraft|npm test/i);

    // The gateway's row first; then the rollout's rows three times over, one message per row, through
    // a consumer that has every other batch delivered again.
    const msg = (table: LakeMessage["table"], r: LakeRow[]): LakeMessage => ({ v: 1, table, rows: r });
    const sends: LakeMessage[] = [];
    for (let i = 0; i < 3; i++) {
      sends.push(msg("rollouts", rows.rollouts));
      for (const r of rows.rollout_steps) sends.push(msg("rollout_steps", [r]));
    }
    const { day, hour } = partitionOf("rollouts", startedAt);
    const read = (token: string, table: string, extra = "") =>
      call(`/v1/envs/rows/${table}?day=${day}&hour=${hour}${extra}`, { token });
    // The gateway's capture, as AgentGateway.chat hands it to waitUntil: sealed with the org's key
    // from D1 and sent through the records queue, whose consumer writes it to the lake.
    await captureCall(
      env,
      { taskId: summary.rolloutId, orgId: owner.org.id, keyId: owner.key.id, capture: tag },
      { model: "agent-simulated" },
      answerBody,
      startedAt + 60_000,
      startedAt + 61_000,
    );
    const deadline = Date.now() + 60_000;
    for (;;) {
      const landed = await expectJson(await read(owner.key.key, "rollout_steps"), 200, RowsAnswer);
      if (landed.rows.some((r) => r.step_id === `${summary.rolloutId}.m2`)) break;
      if (Date.now() > deadline) throw new Error("the gateway's capture never reached the lake");
      await scheduler.wait(200);
    }
    // Each partition's first write of these rows fails after its file is written, before its commit.
    for (const table of ["rollouts", "rollout_steps"] as const) {
      const stub = env.LAKE_PARTITION.get(env.LAKE_PARTITION.idFromName(partitionName(partitionOf(table, startedAt))));
      await runInDurableObject(stub, (object) => {
        // Every second write fails, and the next is the second.
        const held = object as unknown as { env: Env; writes: number };
        held.env = { ...held.env, LAKE_FAULT_EVERY: "2" } as Env;
        held.writes = 1;
      });
    }
    // Two deliveries with every second batch redelivered: one of them is, whatever the count before.
    const half = Math.ceil(sends.length / 2);
    const redelivered = (await deliver(sends.slice(0, half), "2")) + (await deliver(sends.slice(half), "2"));
    expect(redelivered).toBeGreaterThan(0);
    // Each partition's failed write was made again: three writes (the count set, the fault, the retry).
    for (const table of ["rollouts", "rollout_steps"] as const) {
      const stub = env.LAKE_PARTITION.get(env.LAKE_PARTITION.idFromName(partitionName(partitionOf(table, startedAt))));
      expect(await runInDurableObject(stub, (object) => (object as unknown as { writes: number }).writes)).toBe(3);
    }
    const rollouts = await expectJson(await read(owner.key.key, "rollouts"), 200, RowsAnswer);
    const steps = await expectJson(await read(owner.key.key, "rollout_steps"), 200, RowsAnswer);
    expect(rollouts.rows.filter((r) => r.rollout_id === summary.rolloutId)).toHaveLength(1);
    const mine = steps.rows.filter((r) => r.rollout_id === summary.rolloutId);
    expect(mine.map((r) => r.step_id).sort()).toEqual(rows.rollout_steps.map((r) => r.step_id).sort());
    expect(rollouts.rows[0]).toMatchObject({
      reward: 1,
      advantage: 0.5,
      components: '{"tests":1}',
      task_index: 3,
      outcome: "finished",
    });

    // The org opens them; the call the gateway captured kept its log-probabilities and token ids.
    const privateKey = await importPrivateKey(pair.privateJwk);
    const last = mine.find((r) => r.step_id === `${summary.rolloutId}.m2`)!;
    expect(last.has_logprobs).toBe(true);
    const opened = await openJson<{ message: Message; token_ids: number[]; prompt_token_ids: number[] }>(
      privateKey,
      String(last.content),
      { orgId: owner.org.id, table: "rollout_steps", rowId: String(last.step_id), keyId: answer.keyId },
    );
    expect(opened).toMatchObject({ message: messages[5], token_ids: [42], prompt_token_ids: [1, 2, 3] });

    // Filters, another org, and a bad query.
    expect((await expectJson(await read(owner.key.key, "rollouts", "&run=run_other"), 200, RowsAnswer)).rows).toEqual(
      [],
    );
    const stranger = await createAccount();
    expect((await expectJson(await read(stranger.key.key, "rollout_steps"), 200, RowsAnswer)).rows).toEqual([]);
    await expectProblem(await read(owner.key.key, "editor_events"), 404, "not_found");
    await expectProblem(
      await call(`/v1/envs/rows/rollouts?day=${day}&hour=24`, { token: owner.key.key }),
      400,
      "invalid_request",
    );

    // The lake's bucket holds the rows' Parquet, and none of the conversation's text.
    const stored = await bucketText(`lake/rollout_steps/day=${day}/hour=${hour}/`);
    expect(stored.length).toBeGreaterThan(0);
    expect(stored).toContain(summary.rolloutId);
    for (const text of ["secret-ledger", "overdraft", "SECRET_BALANCE", "npm test", "You are Sextant"])
      expect(stored).not.toContain(text);
    expect(await bucketText(`lake/rollouts/day=${day}/hour=${hour}/`)).not.toContain("secret-ledger");
  });
});
