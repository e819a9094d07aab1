/**
 * Captured rollouts as training data: the org's `rollouts` and `rollout_steps` rows opened with its
 * private key and laid out as
 *
 * - TRL's conversational prompt–completion format, a JSON line per rollout: `prompt` (the opening
 *   system and user messages), `completion` (every assistant and tool message after, tool calls
 *   included), `reward`, and the rollout's ids, advantage and reward components beside them;
 * - Harbor's ATIF (`ATIF-v1.4`) trajectory per rollout: a system and a user step, then an agent step
 *   per model call with its tool calls, their results as its observation, and its metrics (tokens,
 *   `completion_token_ids`, `logprobs`, `prompt_token_ids`) where they were captured.
 */
import type { LakeRow } from "../../protocol/lake.js";
import { importPrivateKey, openJson } from "../../protocol/envs/seal.js";
import type { Message, TokenLogprob } from "../../protocol/envs/rollout-rows.js";

type Key = Awaited<ReturnType<typeof importPrivateKey>>;

interface StepContent {
  turn: number;
  message: Message;
  logprobs?: TokenLogprob[];
  token_ids?: number[];
  prompt_token_ids?: number[];
  omitted?: string;
}

export interface OpenedStep {
  row: LakeRow;
  content: StepContent;
}

export interface OpenedRollout {
  row: LakeRow;
  opening: Message[];
  steps: OpenedStep[];
}

const open = <T>(key: Key, row: LakeRow, table: string, idColumn: string) =>
  openJson<T>(key, String(row.content), {
    orgId: String(row.org_id),
    table,
    rowId: String(row[idColumn]),
    keyId: String(row.content_key_id),
  });

/** Opens the rows (a rollout's rows may come in any order); rows sealed to another key are refused. */
export async function openRollouts(jwk: JsonWebKey, rollouts: LakeRow[], steps: LakeRow[]): Promise<OpenedRollout[]> {
  const key = await importPrivateKey(jwk);
  const byRollout = new Map<string, OpenedStep[]>();
  for (const row of steps) {
    const content = await open<StepContent>(key, row, "rollout_steps", "step_id");
    const list = byRollout.get(String(row.rollout_id)) ?? [];
    list.push({ row, content });
    byRollout.set(String(row.rollout_id), list);
  }
  const out: OpenedRollout[] = [];
  for (const row of rollouts) {
    const { messages } = await open<{ messages: Message[] }>(key, row, "rollouts", "rollout_id");
    const own = (byRollout.get(String(row.rollout_id)) ?? []).sort((a, b) => Number(a.row.seq) - Number(b.row.seq));
    out.push({ row, opening: messages, steps: own });
  }
  return out.sort((a, b) => String(a.row.rollout_id).localeCompare(String(b.row.rollout_id)));
}

const components = (row: LakeRow): Record<string, number> => {
  try {
    return JSON.parse(String(row.components ?? "{}")) as Record<string, number>;
  } catch {
    return {};
  }
};

const ids = (r: OpenedRollout) => ({
  rollout_id: r.row.rollout_id,
  run_id: r.row.run_id ?? null,
  task_sha256: r.row.task_sha256 ?? null,
  task_index: r.row.task_index ?? null,
  seed: r.row.seed ?? null,
  policy: r.row.policy ?? null,
  checkpoint: r.row.checkpoint ?? null,
});

/** One TRL conversational prompt–completion record. */
export function trlRecord(r: OpenedRollout): Record<string, unknown> {
  return {
    prompt: r.opening,
    completion: r.steps.filter((s) => !s.content.omitted).map((s) => s.content.message),
    reward: r.row.reward ?? null,
    advantage: r.row.advantage ?? null,
    components: components(r.row),
    outcome: r.row.outcome ?? null,
    ...ids(r),
  };
}

const iso = (ms: unknown) => (typeof ms === "number" ? new Date(ms).toISOString() : undefined);

function args(text: string): Record<string, unknown> {
  try {
    const parsed = JSON.parse(text) as unknown;
    return parsed && typeof parsed === "object" && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : { value: parsed };
  } catch {
    return { raw: text };
  }
}

/** One ATIF trajectory. */
export function atifTrajectory(r: OpenedRollout, agent: { name: string; version: string }): Record<string, unknown> {
  const steps: Record<string, unknown>[] = [];
  for (const m of r.opening)
    if (m.role === "system" || m.role === "user") steps.push({ source: m.role, message: m.content });
  let promptTokens = 0;
  let completionTokens = 0;
  let current: Record<string, unknown> | undefined;
  for (const { row, content } of r.steps) {
    const m = content.message;
    if (m?.role === "assistant") {
      const metrics: Record<string, unknown> = {};
      if (typeof row.prompt_tokens === "number")
        metrics.prompt_tokens = ((promptTokens += row.prompt_tokens), row.prompt_tokens);
      if (typeof row.completion_tokens === "number")
        metrics.completion_tokens = ((completionTokens += row.completion_tokens), row.completion_tokens);
      if (content.token_ids) metrics.completion_token_ids = content.token_ids;
      if (content.logprobs) metrics.logprobs = content.logprobs.map((e) => e.logprob);
      if (content.prompt_token_ids) metrics.prompt_token_ids = content.prompt_token_ids;
      current = {
        source: "agent",
        timestamp: iso(row.step_at),
        model_name: row.model ?? undefined,
        message: m.content ?? "",
        ...(m.tool_calls?.length
          ? {
              tool_calls: m.tool_calls.map((c) => ({
                tool_call_id: c.id,
                function_name: c.function.name,
                arguments: args(c.function.arguments),
              })),
            }
          : {}),
        ...(Object.keys(metrics).length ? { metrics } : {}),
        extra: { finish_reason: row.finish_reason ?? null, turn: content.turn },
      };
      steps.push(current);
    } else if (m?.role === "tool" && current) {
      const observation = (current.observation ??= { results: [] }) as { results: unknown[] };
      observation.results.push({ source_call_id: m.tool_call_id, content: m.content });
    }
  }
  return {
    schema_version: "ATIF-v1.4",
    session_id: String(r.row.rollout_id),
    agent: { name: agent.name, version: agent.version, model_name: r.row.policy ?? undefined },
    steps: steps.map((s, i) => ({ step_id: i + 1, ...s })),
    final_metrics: {
      total_prompt_tokens: promptTokens,
      total_completion_tokens: completionTokens,
      total_steps: steps.length,
      extra: { reward: r.row.reward ?? null, advantage: r.row.advantage ?? null, components: components(r.row) },
    },
    extra: { outcome: r.row.outcome ?? null, ...ids(r) },
  };
}
