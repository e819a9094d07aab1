/**
 * One model request through the gateway: pick endpoints, fail over before the first token within
 * the retry budget and the deadline, and hedge late tab requests; then hand the stream that won to
 * the relay (relay.ts), which ends a broken one with an explicit error event, never a silent
 * truncation.
 */
import { ApiError } from "../problem.js";
import { anthropicCannotServe } from "./anthropic.js";
import { attempt, logged } from "./attempt.js";
import {
  continuation,
  peers,
  type Attempt,
  type Failure,
  type Finish,
  type Leg,
  type ProxyRequest,
  type Usage,
  type Win,
} from "./legs.js";
import { answer, relay } from "./relay.js";

export { errorEvent, type Finish, type ProxyRequest, type Trace, type Usage } from "./legs.js";

/** A retry into an endpoint at most this loaded (its own request included) spends no budget. */
const IDLE_LOAD = 0.5;

/**
 * Runs the request. Returns the response to send, or throws an ApiError when no backend accepted
 * it. A stream's response starts as soon as a backend accepts the request (answers 200), so the
 * client's first token is not held behind the response's start; until that first token the edge
 * still fails over and hedges, unseen by the client, and a stream that no backend could serve ends
 * with one explicit `event: error`. A JSON answer is returned whole, from whichever backend gave it.
 */
export async function proxy(req: ProxyRequest): Promise<Response> {
  const { balancer, pool } = req;
  const started = Date.now();
  const deadline = started + pool.timeouts.deadlineMs;
  const tried = new Set<string>();
  const running = new Set<Attempt>();
  let attempts = 0;
  let lastFailure: Failure | undefined;
  /** Every attempt that failed before an answer, for the log line of a request none answered. */
  const failures: { endpoint: string; reason: string }[] = [];
  let hedged = false;
  let firstTokenAt: number | undefined;
  let finished = false;
  const usage: Usage = { promptTokens: 0, completionTokens: 0 };
  const finish = (result: Finish) => {
    if (finished) return;
    finished = true;
    req.finish(result, { startedAt: started, firstTokenAt, attempts, hedged });
  };

  // Endpoints that cannot take this request at all (Anthropic's API has no logprobs, audio, …)
  // are passed over as if already tried; when that leaves none, the request is what is wrong.
  const unable = req.surface === "chat" ? pool.endpoints.filter((e) => e.kind === "anthropic") : [];
  const cannot = unable.length > 0 ? anthropicCannotServe(req.body) : undefined;
  if (cannot) {
    if (unable.length === pool.endpoints.length) {
      finish({ outcome: "failed", usage });
      throw new ApiError(
        "invalid_request",
        `Pool ${pool.name} is served by Anthropic's Messages API, which cannot take ${cannot}.`,
      );
    }
    for (const e of unable) tried.add(e.id);
  }

  const end = (a: Attempt) => {
    running.delete(a);
    balancer.release(pool, a.endpoint);
  };

  const onClientAbort = () => {
    for (const a of running) a.controller.abort(new Error("client went away"));
  };
  req.signal.addEventListener("abort", onClientAbort, { once: true });

  /** Starts an attempt on the best endpoint with room; false when none can be had now. */
  let accept: () => void = () => {};
  const accepted = new Promise<void>((resolve) => (accept = resolve));

  const launch = (retry: boolean, otherRegionThan?: string): boolean => {
    if (attempts >= pool.retries.maxAttempts || Date.now() >= deadline) return false;
    const now = Date.now();
    const candidates = balancer.candidates(pool, req.from, now);
    const endpoint = balancer.acquire(pool, candidates, req.cls, now, tried, otherRegionThan, req.capacityShare);
    if (!endpoint) return false;
    // A retry into a mostly idle endpoint cannot overload it, and one after a "full" answer cost
    // the first backend nothing: neither spends the retry budget.
    const idle = balancer.load(endpoint, pool, req.cls, now) <= IDLE_LOAD;
    if (!retry) balancer.earnRetry(pool, now);
    else if (!lastFailure?.full && !idle && !balancer.takeRetry(pool, now)) {
      balancer.release(pool, endpoint);
      return false;
    }
    attempts++;
    tried.add(endpoint.id);
    const controller = new AbortController();
    running.add({ endpoint, controller, result: attempt(req, endpoint, controller, deadline, accept) });
    return true;
  };

  /**
   * Tab only: continues a completion that broke after its first token on another endpoint, from
   * the prompt plus the text already sent, so the client's stream goes on instead of ending.
   */
  const resume = async (sent: string, tokens: number, failedOn: Attempt): Promise<Leg | undefined> => {
    const body = continuation(req, sent, tokens);
    if (!body) return undefined;
    const resumed: ProxyRequest = { ...req, body };
    while (attempts < pool.retries.maxAttempts && Date.now() < deadline && !req.signal.aborted) {
      const now = Date.now();
      const candidates = balancer.candidates(pool, req.from, now);
      const exclude = new Set([...tried, failedOn.endpoint.id]);
      const endpoint = balancer.acquire(pool, candidates, req.cls, now, exclude, undefined, req.capacityShare);
      if (!endpoint) return undefined;
      if (balancer.load(endpoint, pool, req.cls, now) > IDLE_LOAD && !balancer.takeRetry(pool)) {
        balancer.release(pool, endpoint);
        return undefined;
      }
      attempts++;
      tried.add(endpoint.id);
      const controller = new AbortController();
      const a: Attempt = { endpoint, controller, result: attempt(resumed, endpoint, controller, deadline) };
      const outcome = await a.result;
      if (outcome.ok && outcome.kind === "stream") return { a, outcome, release: () => end(a) };
      end(a);
      if (!outcome.ok && outcome.unhealthy && !outcome.aborted) {
        const until = balancer.failed(endpoint, Date.now(), peers(req));
        if (until !== undefined) req.eject(endpoint.id, until, logged(outcome));
      }
    }
    return undefined;
  };

  /** The attempt that answered first (its first token, or its whole answer). */
  const decide = async (): Promise<Win> => {
    try {
      // The first attempt; a tab request may wait briefly for a slot.
      while (!launch(false)) {
        const now = Date.now();
        const routable = balancer.candidates(pool, req.from, now);
        if (routable.length === 0)
          throw new ApiError("unavailable", `No backend of pool ${pool.name} is healthy right now.`, {
            headers: { "Retry-After": String(Math.ceil(req.gateway.config.health.probeIntervalMs / 1000)) },
          });
        const wait = req.cls === "tab" ? req.gateway.config.tabQueueMs - (now - started) : 0;
        if (wait <= 0 || !(await balancer.waitForSlot(wait, req.signal))) {
          if (req.signal.aborted) throw new ApiError("unavailable", "The client went away.");
          throw new ApiError(
            "unavailable",
            `The ${req.cls} class is being shed: pool ${pool.name}'s backends are at the share of capacity it may use.`,
            { headers: { "Retry-After": "1" } },
          );
        }
      }

      for (;;) {
        if (running.size === 0) {
          const canRetry = lastFailure?.retryable !== false && !req.signal.aborted;
          if (!canRetry || !launch(true)) break;
        }
        const hedgeAt =
          pool.hedgeAfterMs !== undefined && !hedged && running.size === 1 ? started + pool.hedgeAfterMs : undefined;
        let hedgeTimer: ReturnType<typeof setTimeout> | undefined;
        const settled = await Promise.race([
          ...[...running].map((a) => a.result.then((outcome) => ({ a, outcome }))),
          ...(hedgeAt !== undefined
            ? [
                new Promise<"hedge">(
                  (resolve) => (hedgeTimer = setTimeout(() => resolve("hedge"), Math.max(0, hedgeAt - Date.now()))),
                ),
              ]
            : []),
        ]);
        if (hedgeTimer !== undefined) clearTimeout(hedgeTimer);
        if (settled === "hedge") {
          hedged = true;
          const [primary] = running;
          launch(true, primary!.endpoint.region) || launch(true);
          continue;
        }
        const { a, outcome } = settled;
        if (outcome.ok) {
          // The winner: cancel the rest and relay.
          running.delete(a);
          for (const other of running) {
            other.controller.abort(new Error("another attempt answered first"));
            void other.result.then(() => end(other));
          }
          running.clear();
          firstTokenAt = Date.now();
          // A stream proves the endpoint healthy only when it completes.
          if (outcome.kind === "json") balancer.succeeded(a.endpoint);
          return { a, outcome, release: () => end(a) };
        }
        end(a);
        lastFailure = outcome;
        if (!outcome.aborted) failures.push({ endpoint: a.endpoint.id, reason: logged(outcome) });
        if (outcome.full) balancer.full(a.endpoint, Date.now());
        if (outcome.unhealthy && !outcome.aborted) {
          const until = balancer.failed(a.endpoint, Date.now(), peers(req));
          if (until !== undefined) req.eject(a.endpoint.id, until, logged(outcome));
        }
        if (outcome.aborted && req.signal.aborted) break;
        if (!outcome.retryable && running.size === 0) break;
      }

      // Nothing answered.
      for (const a of running) {
        a.controller.abort(new Error("giving up"));
        void a.result.then(() => end(a));
      }
      running.clear();
      if (req.signal.aborted) throw new ApiError("unavailable", "The request was cancelled.");
      if (lastFailure && !lastFailure.retryable && lastFailure.status)
        throw new ApiError("invalid_request", `The backend refused the request: ${lastFailure.detail}`);
      if (!lastFailure)
        throw new ApiError("unavailable", `No backend of pool ${pool.name} has room right now.`, {
          headers: { "Retry-After": "1" },
        });
      const code = lastFailure.timeout ? "upstream_timeout" : "upstream_failure";
      req.log("no backend answered", { pool: pool.name, code, attempts, failures });
      throw new ApiError(
        code,
        `No backend of pool ${pool.name} answered (${attempts} attempt${attempts === 1 ? "" : "s"}): ${lastFailure.detail}`,
      );
    } catch (err) {
      finish({ outcome: req.signal.aborted ? "aborted" : "failed", usage });
      throw err;
    } finally {
      req.signal.removeEventListener("abort", onClientAbort);
    }
  };

  const decided = decide();
  if (!req.stream) return answer(req, await decided, usage, finish);
  // Whichever comes first: a backend accepting the stream, or the decision (a refusal, typically).
  const refused = await Promise.race([
    decided.then(
      () => undefined,
      (error: unknown) => ({ error }),
    ),
    accepted.then(() => undefined),
  ]);
  if (refused) throw refused.error;
  return relay(req, decided, usage, finish, resume);
}
