/**
 * A user steering a running agent task: a cancel (the task ends; a command still running is killed,
 * the tree and its diff stay) and a follow-up message (read at the start of the next turn; a
 * finished task runs again from where it ended).
 */
import { isTerminal } from "../../protocol/agents/task.js";
import type { LoopHost } from "./loop.js";
import { TaskNotReady } from "./result.js";
import { seal } from "./seal.js";
import type { ChatMessage } from "./turn.js";

export async function cancelTask(host: LoopHost): Promise<void> {
  const before = host.mustState();
  if (isTerminal(before.status)) return;
  await host.dataKey(before).catch(() => undefined);
  // Read again: the turn may have recorded usage (or ended the task) while the key was fetched.
  const state = host.mustState();
  if (isTerminal(state.status)) return;
  await host.end(state, "cancelled", {});
  await host
    .sandbox(state.id)
    .stop()
    .catch(() => undefined);
}

export async function followUp(host: LoopHost, content: string): Promise<void> {
  const state = host.mustState();
  if (state.status === "cancelled" || state.status === "failed")
    throw new TaskNotReady(`The task is ${state.status}; start a new one.`);
  const key = await host.dataKey(state);
  if (!key) throw new TaskNotReady("The task's sandbox is gone; start a new one.");
  host.store.queueFollowUp(await seal(key, { role: "user", content } satisfies ChatMessage));
  await host.event("user.message", { content });
  if (state.status === "finished") {
    state.status = "running";
    state.endReason = null;
    state.endedAt = null;
    host.store.saveState(state);
    await host.storage.setAlarm(Date.now());
  }
  host.notify();
}
