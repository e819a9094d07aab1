/**
 * The sandbox host's routes (`protocol/agents/sandbox.ts`): the token checked in constant time, the
 * path taken apart, bodies read under their cap, and each route handed to what the host does.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { CallId, SandboxId, SearchPrepareRequest, type SandboxInfo } from "../protocol/agents/sandbox.js";
import type { z } from "zod";
import { body, HttpError, parse } from "./http.js";

export interface RouteHandlers<S> {
  token: string;
  maxBody: number;
  create(body: unknown): Promise<[number, unknown]>;
  /** The sandbox of an id (404 when there is none). */
  sandbox(id: string): S;
  info(s: S): Promise<SandboxInfo>;
  destroy(s: S): Promise<void>;
  stop(s: S): Promise<void>;
  upload(s: S, body: unknown): Promise<[number, unknown]>;
  call(s: S, callId: string, body: unknown): Promise<[number, unknown]>;
  diff(s: S): Promise<unknown>;
  search(s: S, args: z.output<typeof SearchPrepareRequest>): unknown;
}

const digest = (s: string) => createHash("sha256").update(s).digest();

export function router<S>(h: RouteHandlers<S>): (req: IncomingMessage) => Promise<[number, unknown]> {
  const expected = digest(h.token);
  return async (req) => {
    const auth = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (!auth || !timingSafeEqual(digest(auth), expected))
      throw new HttpError(401, "unauthenticated", "Send the host's token as `Authorization: Bearer …`.");
    const url = new URL(req.url ?? "/", "http://host");
    const parts = url.pathname.split("/").filter(Boolean);
    if (parts[0] !== "v1" || parts[1] !== "sandboxes") throw new HttpError(404, "not_found", "No such route.");
    const [, , id, what, callId] = parts;
    const method = req.method ?? "GET";
    if (!id && method === "POST") return h.create(await body(req, h.maxBody));
    if (!id || !SandboxId.safeParse(id).success) throw new HttpError(404, "not_found", "No such sandbox.");
    if (!what && method === "GET") return [200, await h.info(h.sandbox(id))];
    if (!what && method === "DELETE") {
      await h.destroy(h.sandbox(id));
      return [204, undefined];
    }
    if (what === "stop" && method === "POST") {
      await h.stop(h.sandbox(id));
      return [204, undefined];
    }
    if (what === "files" && method === "POST") return h.upload(h.sandbox(id), await body(req, h.maxBody));
    if (what === "diff" && method === "GET") return [200, await h.diff(h.sandbox(id))];
    if (what === "search" && method === "POST") {
      const s = h.sandbox(id);
      return [200, h.search(s, parse(SearchPrepareRequest, await body(req, h.maxBody)))];
    }
    if (what === "calls" && callId && method === "POST") {
      if (!CallId.safeParse(callId).success)
        throw new HttpError(400, "invalid_request", "A call id is 1 to 128 of A-Z a-z 0-9 _ . : -");
      return h.call(h.sandbox(id), callId, await body(req, h.maxBody));
    }
    throw new HttpError(404, "not_found", `No route for ${method} ${url.pathname}.`);
  };
}
