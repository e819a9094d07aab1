export { Agents, TaskDiff, type TaskDiffResponse, type TaskEventsOptions, type UploadedFiles } from "./agents.js";
export {
  Envs,
  type CreateTaskSetRequest,
  type CreatedTaskSetInfo,
  type PushedTaskSet,
  type PushOptions,
  type StoredArchiveInfo,
  type TaskToPush,
} from "./envs.js";
export {
  EnvSession,
  EnvSessions,
  type CreateSessionRequest,
  type CreatedSession,
  type SessionDiff,
  type SessionState,
  type StepOptions,
  type StepResponse,
  type StepToolCall,
  type VerifyResponse,
} from "./env-sessions.js";
export { Rollouts, type RolloutStreamOptions } from "./rollouts.js";
export type { RunStreamOptions } from "./run-events.js";
export {
  Evals,
  type CreateEvalRunRequest,
  type EvalAttempt,
  type EvalComparison,
  type EvalReport,
  type EvalRun,
  type EvalStreamOptions,
  type EvalSummary,
  type EvalTaskReport,
  type RunComparison,
} from "./evals.js";
export { compareRuns, passAtK, summarize, taskStats } from "../../protocol/evals/stats.js";
export type {
  CompareOptions,
  ComparedTask,
  RunSummary as EvalRunSummary,
  TaskStats,
} from "../../protocol/evals/stats.js";
export { DEFAULT_BASE_URL, Sextant, SextantAdmin } from "./client.js";
export type { ClientOptions, PerRequest, SextantAdminOptions, SextantOptions } from "./client.js";
export * from "./errors.js";
export { parseRateLimit, type RateLimitField } from "./rate-limit.js";
export { EventRecorder, Events, type NewEvent, type RecorderOptions } from "./events.js";
export { TabSession, type SuggestionRef } from "./tab-session.js";
export { parseTranslation, translationsWith, TranslationError } from "./translations.js";
export type { TranslatedWord, TranslationTable } from "./translations.js";
export { contentKey, openContent, sealContent } from "../../protocol/sealed-content.js";
export type { EditorEvent, EditorEventType, EventRefusal, EventsResponse } from "../../protocol/events.js";
export { PRIORITY_HEADER, SESSION_HEADER } from "../../protocol/gateway.js";
export type * from "../../protocol/schemas.js";
export type * from "../../protocol/agents/task.js";
