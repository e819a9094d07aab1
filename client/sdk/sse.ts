/**
 * The edge's server-sent event streams as the SDK reads them (a task's events, a rollout run's):
 * opening one connection with its `Last-Event-ID`, and reading its messages while the connection
 * stays alive. Reconnecting is the caller's, which knows which breaks its stream can resume from.
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { VERSION } from "../../protocol/version.js";
import { APIConnectionError } from "./errors.js";
import { describe, type HttpClient } from "./http.js";

export interface StreamRequest {
  method?: "GET" | "POST";
  path: string;
  /** Sent as JSON. */
  body?: unknown;
  /** The last event id already read, sent as `Last-Event-ID`. */
  last?: number;
  /** What aborts a connection whose headers have not come within the client's timeout (ms). */
  timeoutError: (timeout: number) => APIConnectionError;
}

/**
 * Opens one stream on `connection`; a connection that fails or is aborted for not answering
 * rejects with an `APIConnectionError`, and the caller's abort with its own reason.
 */
export async function openStream(
  http: HttpClient,
  connection: AbortController,
  request: StreamRequest,
): Promise<Response> {
  const { baseURL, token, timeout, defaultHeaders } = http.options;
  const { body, last } = request;
  const url = new URL(request.path.slice(1), baseURL.replace(/\/?$/, "/"));
  const headers: Record<string, string> = {
    Accept: "text/event-stream",
    "User-Agent": `sextant-sdk/${VERSION}`,
    "X-Request-Id": `sdk-${crypto.randomUUID()}`,
    ...defaultHeaders,
    ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
    ...(last !== undefined ? { "Last-Event-ID": String(last) } : {}),
  };
  if (token) headers.Authorization = `Bearer ${token}`;
  // The timeout covers the response's headers only: a stream may stay open for hours.
  const timer = setTimeout(() => connection.abort(request.timeoutError(timeout)), timeout);
  try {
    return await http.options.fetch(url, {
      method: request.method ?? "GET",
      headers,
      signal: connection.signal,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch (err) {
    if (connection.signal.reason instanceof APIConnectionError) throw connection.signal.reason;
    throw new APIConnectionError(`Could not reach the Sextant edge at ${url.origin}: ${describe(err)}`, {
      cause: err,
    });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * SSE messages of one connection; a broken or silent connection ends it with an `APIConnectionError`
 * whose message begins with `name` ("The event stream").
 */
export async function* messages(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
  connection: AbortController,
  name: string,
): AsyncGenerator<EventSourceMessage> {
  const queue: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (message) => queue.push(message) });
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      // Only the wait for bytes is timed: a consumer may take as long as it likes between events.
      const timer = setTimeout(
        () => connection.abort(new APIConnectionError(`${name} sent nothing for ${idleMs} ms.`)),
        idleMs,
      );
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (connection.signal.reason instanceof APIConnectionError) throw connection.signal.reason;
        throw new APIConnectionError(`${name} broke: ${describe(err)}`, { cause: err });
      } finally {
        clearTimeout(timer);
      }
      if (chunk.done) return;
      parser.feed(decoder.decode(chunk.value, { stream: true }));
      while (queue.length > 0) yield queue.shift()!;
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}
