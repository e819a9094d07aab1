/**
 * The sandbox host's routes (`protocol/agents/sandbox.ts`): the token checked in constant time, the
 * path taken apart, bodies read under their cap, and each route handed to what the host does.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import {
  CallId,
  SandboxId,
  SearchPrepareRequest,
  type ArchiveInfo,
  type SandboxInfo,
} from "../protocol/agents/sandbox.js";
import { Sha256Hex } from "../protocol/envs/task-archive.js";
import type { z } from "zod";
import { body, HttpError, parse, rawBody } from "./http.js";

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
  /** The largest archive a `PUT /v1/archives/{sha256}` takes. */
  maxArchive: number;
  putArchive(sha256: string, bytes: Buffer): Promise<ArchiveInfo>;
  getArchive(sha256: string): ArchiveInfo;
  /** `verify` or `solve` under a call id. */
  phase(s: S, kind: "verify" | "solve", callId: string, body: unknown): Promise<[number, unknown]>;
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
    const method = req.method ?? "GET";
    if (parts[0] === "v1" && parts[1] === "archives" && parts.length === 3) {
      const sha256 = parts[2]!;
      if (!Sha256Hex.safeParse(sha256).success)
        throw new HttpError(400, "invalid_request", "An archive is named by its SHA-256: 64 lowercase hex digits.");
      if (method === "PUT") return [201, await h.putArchive(sha256, await rawBody(req, h.maxArchive))];
      if (method === "GET") return [200, h.getArchive(sha256)];
    }
    if (parts[0] !== "v1" || parts[1] !== "sandboxes") throw new HttpError(404, "not_found", "No such route.");
    const [, , id, what, callId] = parts;
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
    if ((what === "calls" || what === "verify" || what === "solve") && callId && method === "POST") {
      if (!CallId.safeParse(callId).success)
        throw new HttpError(400, "invalid_request", "A call id is 1 to 128 of A-Z a-z 0-9 _ . : -");
      const s = h.sandbox(id);
      if (what === "calls") return h.call(s, callId, await body(req, h.maxBody));
      // A verify or solve may come with no body at all: the task's own timeout then applies.
      const raw = await rawBody(req, 64 * 1024);
      let request: unknown = {};
      try {
        if (raw.length > 0) request = JSON.parse(raw.toString("utf8"));
      } catch {
        throw new HttpError(400, "invalid_request", "The body is not JSON.");
      }
      return h.phase(s, what, callId, request);
    }
    throw new HttpError(404, "not_found", `No route for ${method} ${url.pathname}.`);
  };
}
