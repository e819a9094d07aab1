import type { ApiKeyInfo, Org, User } from "../../protocol/schemas.js";

/** Who is calling: resolved from an API key and cached per isolate. */
export interface Principal {
  org: Org;
  user: User;
  key: ApiKeyInfo;
  /** An abuse throttle on the account, while it lasts. */
  throttle?: { reason: string; until: number } | null;
}
