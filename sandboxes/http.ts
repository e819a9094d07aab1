/**
 * The sandbox host's HTTP plumbing: its errors (`{ code, message }` with a status), JSON bodies read
 * under a size cap, and schema checks that answer 400 with what is wrong.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { z } from "zod";

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function send(res: ServerResponse, status: number, json: unknown): void {
  if (status === 204 || json === undefined) {
    res.writeHead(status).end();
    return;
  }
  const text = JSON.stringify(json);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) }).end(text);
}

export function parse<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const parsed = schema.safeParse(body);
  if (!parsed.success)
    throw new HttpError(
      400,
      "invalid_request",
      parsed.error.issues.map((i) => `${i.path.join(".") || "body"}: ${i.message}`).join("; "),
    );
  return parsed.data;
}

export async function body(req: IncomingMessage, max: number): Promise<unknown> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > max) throw new HttpError(413, "payload_too_large", `The body is over ${max} bytes.`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) throw new HttpError(413, "payload_too_large", `The body is over ${max} bytes.`);
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new HttpError(400, "invalid_request", "The body is not JSON.");
  }
}

/** A body's bytes as sent (an archive), read under a size cap. */
export async function rawBody(req: IncomingMessage, max: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > max) throw new HttpError(413, "payload_too_large", `The body is over ${max} bytes.`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) throw new HttpError(413, "payload_too_large", `The body is over ${max} bytes.`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}
