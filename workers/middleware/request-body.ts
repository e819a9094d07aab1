import { ApiError } from "../problem.js";

export interface BodyGuardOptions {
  /** Bytes the body may hold: more is a 413, however it is framed. */
  maxBytes: number;
  /** How long the body may take to arrive, counted from the first read: longer is a 408. */
  timeoutMs: number;
}

export const tooLarge = (maxBytes: number) =>
  new ApiError("payload_too_large", `Request bodies are limited to ${maxBytes} bytes.`);

/** Bytes of a refused body read and thrown away before the 413, at most. */
export const DRAIN_BYTES = 16 * 1024 * 1024;

/**
 * Reads and discards what is left of a refused body, up to `DRAIN_BYTES` and within `timeoutMs`, so a
 * client still sending it reads the 413 rather than a connection reset in the middle of its write (a
 * lingering close, as nginx does). A body larger than that, or slower, is left unread.
 */
export async function drain(reader: ReadableStreamDefaultReader<Uint8Array>, timeoutMs: number): Promise<void> {
  let timer!: ReturnType<typeof setTimeout>;
  const expired = new Promise<"expired">((resolve) => (timer = setTimeout(() => resolve("expired"), timeoutMs)));
  try {
    for (let read = 0; read <= DRAIN_BYTES; ) {
      const next = await Promise.race([reader.read(), expired]);
      if (next === "expired" || next.done) return;
      read += next.value.byteLength;
    }
  } catch {
    // A body that breaks while being thrown away changes nothing: the answer is the 413.
  } finally {
    clearTimeout(timer);
    reader.cancel().catch(() => {});
  }
}

/**
 * The request with its body read through a guard, so that every reader (`c.req.json()`,
 * `.arrayBuffer()`, a read started ahead of time) fails the same way: a body over the limit is
 * `payload_too_large`, one that stops arriving is `request_timeout` (workerd itself waits for a
 * stalled body without end), and one whose stream breaks (malformed chunked framing, a dropped
 * connection) is `invalid_request` rather than the opaque internal error workerd raises, which
 * would answer 500. The request's `signal` carries over, so a client's disconnect still reaches
 * the gateway.
 */
export function guardedRequest(request: Request, options: BodyGuardOptions): Request {
  if (!request.body) return request;
  return new Request(request, { body: guardedBody(request.body, options) });
}

function guardedBody(body: ReadableStream<Uint8Array>, { maxBytes, timeoutMs }: BodyGuardOptions) {
  const reader = body.getReader();
  const timedOut = () =>
    new ApiError("request_timeout", `The request body did not arrive in full within ${timeoutMs / 1000} s.`);
  let deadline: number | undefined;
  let size = 0;
  // One timer for the whole body, from its first read (a timer costs the runtime about as much as a
  // read): when it fires, the read still waiting on the client is cancelled and fails as a timeout.
  let timer: ReturnType<typeof setTimeout> | undefined;
  let expired = false;
  const stop = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (deadline === undefined) {
          deadline = Date.now() + timeoutMs;
          timer = setTimeout(() => {
            expired = true;
            reader.cancel().catch(() => {});
          }, timeoutMs);
        }
        try {
          const { done, value } = await reader.read();
          if (expired) throw timedOut();
          if (done) {
            stop();
            return controller.close();
          }
          size += value.byteLength;
          if (size > maxBytes) {
            stop();
            await drain(reader, Math.max(0, deadline - Date.now()));
            throw tooLarge(maxBytes);
          }
          controller.enqueue(value);
        } catch (err) {
          stop();
          reader.cancel().catch(() => {});
          controller.error(err instanceof ApiError ? err : expired ? timedOut() : unreadable());
        }
      },
      cancel: (reason) => {
        stop();
        return reader.cancel(reason);
      },
    },
    // Nothing is read until someone asks: a request refused before its body is wanted never waits for it.
    { highWaterMark: 0 },
  );
}

const unreadable = () =>
  new ApiError(
    "invalid_request",
    "The request body could not be read: its framing is malformed, or the connection broke before it ended.",
  );
