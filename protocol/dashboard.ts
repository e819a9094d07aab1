/** What the operator's dashboard shows (`GET /admin/dashboard/data`): computed at the edge, workers/dashboard/data.ts. */
import type { GatewayStatus } from "./gateway.js";
import type { AbuseThrottle } from "./schemas.js";

/** Days of usage and agent tasks the dashboard shows, ending with the day asked for. */
export const USAGE_DAYS = 14;

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
}
