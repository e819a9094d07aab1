/**
 * GRPO's group-relative advantage: each rollout of a task is scored against the other rollouts of
 * the same task, `(r - mean) / (std + 1e-6)`, with the population standard deviation (divided by the
 * group's size, not size - 1) so that a group of two is defined. A group whose rewards are all equal
 * carries no signal, and every member's advantage is 0 (the numerator is 0; the epsilon keeps the
 * division defined).
 */
export const ADVANTAGE_EPSILON = 1e-6;

export interface GroupStats {
  mean: number;
  /** Population standard deviation. */
  std: number;
}

export function groupStats(rewards: readonly number[]): GroupStats {
  if (rewards.length === 0) throw new RangeError("A group needs at least one reward.");
  for (const r of rewards) if (!Number.isFinite(r)) throw new RangeError(`A reward must be a finite number, not ${r}.`);
  const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
  const variance = rewards.reduce((s, r) => s + (r - mean) ** 2, 0) / rewards.length;
  return { mean, std: Math.sqrt(variance) };
}

/** Each member's advantage, in the members' order. */
export function groupAdvantages(rewards: readonly number[]): number[] {
  const { mean, std } = groupStats(rewards);
  // Summing floats can leave a mean a hair off equal rewards; equal rewards must give exactly 0.
  if (rewards.every((r) => r === rewards[0])) return rewards.map(() => 0);
  return rewards.map((r) => (r - mean) / (std + ADVANTAGE_EPSILON));
}
