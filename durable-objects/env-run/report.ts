/**
 * What a rollout run reports, as pure functions of its rows: a member's start, a group's
 * advantages, the run's summary and its view. The run object (`env-run.ts`) stores and logs them.
 */
import { groupAdvantages, groupStats } from "../../protocol/envs/advantages.js";
import type { GroupEnded, RolloutRun, RolloutStarted, RunSummary } from "../../protocol/envs/rollouts.js";
import type { MemberRow, RunState } from "./store.js";

/** The member's AgentTask id: the run's id and its number, so a repeat of its making finds it. */
export const rolloutIdOf = (runId: string, member: number) => `${runId}-${member}`;

export const started = (state: RunState, m: MemberRow): RolloutStarted => ({
  member: m.member,
  groupIndex: m.gi,
  task: state.tasks[m.grp]!,
  seed: m.seed,
  rolloutId: rolloutIdOf(state.id, m.member),
});

/** The end of a member that never ran (or never reported): no reward, nothing used. */
export const unplayed = (outcome: string, why: string) => ({
  reward: null,
  components: {},
  outcome,
  verifyError: why,
  turns: 0,
  tokens: 0,
  toolCalls: 0,
  sandboxSeconds: 0,
  startedAt: null,
  endedAt: null,
});

/**
 * A whole group's advantages, over the members that have a reward: a member with none (it never
 * ran, or could not be verified) gets none, and does not move the others' mean.
 */
export function groupEnded(state: RunState, grp: number, group: MemberRow[]): GroupEnded {
  const scored = group.filter((m) => m.reward !== null);
  const rewards = scored.map((m) => m.reward!);
  const advantages = rewards.length ? groupAdvantages(rewards) : [];
  const stats = rewards.length ? groupStats(rewards) : null;
  const byMember = new Map(scored.map((m, i) => [m.member, advantages[i]!]));
  return {
    task: state.tasks[grp]!,
    group: grp,
    members: group.map((m) => m.member),
    rewards: group.map((m) => m.reward),
    advantages: group.map((m) => byMember.get(m.member) ?? null),
    mean: stats?.mean ?? null,
    std: stats?.std ?? null,
  };
}

export function runSummary(state: RunState, members: MemberRow[], now: number): RunSummary {
  const rewards = members.flatMap((m) => (m.reward === null ? [] : [m.reward]));
  const outcomes: Record<string, number> = {};
  for (const m of members) if (m.outcome) outcomes[m.outcome] = (outcomes[m.outcome] ?? 0) + 1;
  return {
    rollouts: members.length,
    ended: members.filter((m) => m.state === "ended").length,
    verified: rewards.length,
    meanReward: rewards.length ? rewards.reduce((s, r) => s + r, 0) / rewards.length : null,
    solved: rewards.filter((r) => r >= 1).length,
    groups: state.tasks.length,
    outcomes,
    tokens: members.reduce((s, m) => s + (m.tokens ?? 0), 0),
    turns: members.reduce((s, m) => s + (m.turns ?? 0), 0),
    durationMs: now - Date.parse(state.createdAt),
  };
}

export function runView(
  state: RunState,
  members: MemberRow[],
  summary: RunSummary | null,
  lastEventId: number,
): RolloutRun {
  return {
    id: state.id,
    status: state.status,
    taskset: state.taskset,
    tasks: state.tasks,
    policy: state.policy,
    groupSize: state.groupSize,
    sampling: state.sampling,
    concurrency: state.concurrency,
    members: members.map((m) => ({
      member: m.member,
      group: m.grp,
      groupIndex: m.gi,
      seed: m.seed,
      state: m.state,
      rolloutId: m.state === "pending" ? null : rolloutIdOf(state.id, m.member),
      reward: m.reward,
      components: m.components === null ? null : (JSON.parse(m.components) as Record<string, number>),
      outcome: m.outcome,
      advantage: m.advantage,
      turns: m.turns,
      tokens: m.tokens,
    })),
    summary,
    createdAt: state.createdAt,
    endedAt: state.endedAt,
    lastEventId,
  };
}
