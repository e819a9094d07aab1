/** What the operator's dashboard shows (`GET /admin/dashboard/data`): computed at the edge, workers/dashboard/data.ts. */
import type { EvalReport, EvalRun, EvalSummary } from "./evals/api.js";
import type { RunComparison } from "./evals/stats.js";
import type { GatewayStatus } from "./gateway.js";
import type { AbuseThrottle } from "./schemas.js";

/** Days of usage, agent tasks and eval runs the dashboard shows, ending with the day asked for. */
export const USAGE_DAYS = 14;

/** Eval runs the dashboard lists, at most: the newest of its days. */
export const EVAL_RUNS_SHOWN = 200;

/** Whose a run is, as the other panels name an org. */
export interface EvalOwner {
  orgId: string;
  orgName: string;
}

/**
 * An eval run in the dashboard's list: its manifest and its figures (`protocol/evals/stats.ts`).
 * An ended run's figures are those its report kept once it had ended; a running run's are its
 * attempts so far. Null when its rollout run cannot be read.
 */
export type DashboardEvalRun = EvalRun & EvalOwner & { summary: EvalSummary | null };

/** `GET /admin/dashboard/evals/{id}`: any org's run, as its owner's `GET /v1/evals/runs/{id}` reports it. */
export type DashboardEvalReport = EvalReport & EvalOwner;

/**
 * `GET /admin/dashboard/evals/compare?a=&b=`: both reports and `b` against `a` task by task, by
 * `compareRuns` with its defaults (the interval the CLI's `sextant eval compare` prints).
 */
export interface DashboardEvalComparison {
  a: DashboardEvalReport;
  b: DashboardEvalReport;
  comparison: RunComparison;
}

export interface TabFigures {
  shown: number;
  accepted: number;
  /** `accepted / shown`, or null with nothing shown. */
  acceptanceRate: number | null;
  /** Completed tab requests the latency figures cover. */
  requests: number;
  ttftP50: number | null;
  ttftP95: number | null;
  totalP50: number | null;
  totalP95: number | null;
}

export interface DashboardData {
  day: string;
  generatedAt: string;
  tab: { day: TabFigures; hours: (TabFigures & { hour: string })[] };
  usage: {
    days: string[];
    byModel: { day: string; model: string; requests: number; tokens: number }[];
    rows: {
      day: string;
      orgId: string;
      orgName: string;
      keyId: string;
      /** The key's name and display prefix (never its secret); null once the key is deleted. */
      keyName: string | null;
      keyPrefix: string | null;
      model: string;
      requests: number;
      promptTokens: number;
      completionTokens: number;
    }[];
  };
  refusals: {
    total: number;
    hours: { hour: string; byClass: Record<string, number> }[];
    byLimit: Record<string, number>;
  };
  throttles: AbuseThrottle[];
  agents: {
    /** Every day of `usage.days`, 0 where no task was created. */
    createdByDay: { day: string; tasks: number }[];
    outcomes: Record<string, number>;
  };
  gateway: GatewayStatus | { error: string };
  /** The eval runs made in `usage.days`, every org's, newest first. */
  evals: { runs: DashboardEvalRun[] };
}
