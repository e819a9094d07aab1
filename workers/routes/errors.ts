import { Hono } from "hono";
import { ERROR_CODES, isErrorCode, problemType } from "../../protocol/errors.js";
import type { AppEnv } from "../app-env.js";
import { ApiError } from "../problem.js";

const describe = (code: keyof typeof ERROR_CODES) => ({ code, type: problemType(code), ...ERROR_CODES[code] });

/** Every problem's `type` resolves here, so a client can look an unfamiliar code up. */
export const errors = new Hono<AppEnv>()
  .get("/", (c) => c.json({ data: Object.keys(ERROR_CODES).map((code) => describe(code as keyof typeof ERROR_CODES)) }))
  .get("/:code", (c) => {
    const code = c.req.param("code");
    if (!isErrorCode(code)) throw new ApiError("not_found", `There is no error code \`${code}\`.`);
    return c.json(describe(code));
  });
