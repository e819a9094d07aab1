/**
 * A rollout played without a model, to check a task rather than a policy: `oracle` runs the task's
 * reference solution (`solution/solve.sh`, through the sandbox host's solve route), `noop` leaves the
 * tree as it came. Either then ends the loop, and the rollout is verified and reported to its run as
 * any other (`rollout.ts`). Nothing is asked of the gateway: no model call, no tokens, and no
 * conversation to capture; the sandbox's time is still counted against the task's budget and the
 * org's quota, as a model's commands are.
 */
import { budgetStop } from "./turn.js";
import type { LoopHost } from "./loop.js";
import { SandboxUnavailable } from "./sandbox-client.js";
import type { TaskState } from "./store.js";

/**
 * Plays the rollout to its end. The solve runs under one call id per rollout, so an alarm run again
 * after an eviction or a crash mid-solve is answered the host's record (or waits on the run in
 * flight) rather than solving twice.
 */
export async function playWithoutModel(host: LoopHost, initial: TaskState, agent: "oracle" | "noop"): Promise<void> {
  if (agent === "noop") return host.end(initial, "finished", { agent });
  const key = await host.dataKey(initial);
  if (!key) throw new SandboxUnavailable("The task's sandbox is gone.", 404);
  const sandbox = host.sandbox(initial.id);
  const info = await sandbox.info();
  let state = host.mustState();
  if (state.status !== "running") return;
  // A task without a solution scores what it started as: the run hears why, with the verifier's reward.
  if (!info.task?.hasSolution)
    return host.end(state, "solve_error", {
      agent,
      message: "The task has no reference solution (solution/solve.sh).",
    });
  const stop = budgetStop(state, Date.now(), info.commandSeconds, null);
  if (stop) return host.end(state, stop, { agent, message: `The task's ${stop.replace("_", " ")} budget is spent.` });
  const deadline = Date.parse(state.startedAt!) + state.limits.wallSeconds * 1000;
  const timeoutMs = Math.floor(
    Math.max(100, Math.min(deadline - Date.now(), (state.limits.sandboxSeconds - info.commandSeconds) * 1000)),
  );
  const callId = `${state.id}.solve`;
  const out = await sandbox.solve(callId, timeoutMs);
  const after = await sandbox.info();
  state = host.mustState();
  if (state.status !== "running") return;
  state.usage.sandboxSeconds = after.commandSeconds;
  host.store.saveState(state);
  await host.event("tool.result", {
    callId,
    tool: "solve",
    ok: out.exitCode === 0 && !out.timedOut,
    result: { exitCode: out.exitCode, timedOut: out.timedOut, log: out.log },
    durationMs: out.durationMs,
    replayed: out.replayed,
  });
  host.notify();
  if (out.exitCode === 0 && !out.timedOut) return host.end(state, "finished", { agent });
  // A failed solution ends as `solve_error`, and the rollout is still verified: its reward says
  // what the tree it left scores, and the outcome says the task's own solution failed.
  const why = out.timedOut ? "ran out of time" : `exited with ${out.exitCode ?? "a signal"}`;
  await host.end(state, "solve_error", { agent, message: `The reference solution ${why}.` });
}
