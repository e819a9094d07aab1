import type { Config } from "./config.js";
import type { Principal } from "./auth/principal.js";
import type { LimitClass } from "../protocol/limits.js";

/**
 * Hono's environment for every route: bindings from `wrangler types`, plus per-request state. Read
 * the state with `c.get(name)`: Hono's `c.var` builds a new object from every variable on each read.
 */
export interface AppEnv {
  Bindings: Env;
  Variables: {
    requestId: string;
    config: Config;
    principal: Principal;
    /** The rate-limit class the request was admitted (or refused) under, once known. */
    limitClass: LimitClass;
  };
}
