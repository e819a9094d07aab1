/** A V8 CPU profile (the inspector's `Profiler.stop`), and where its time went. */
export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Each function's share of the profile's time: its own, and with what it called. */
export function summarize(profile: Profile, top = 25): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const name = (n: ProfileNode) =>
    `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.split("/").pop()}:${n.callFrame.lineNumber + 1}`;
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    total += dt;
    const seen = new Set<string>();
    self.set(name(byId.get(id)!), (self.get(name(byId.get(id)!)) ?? 0) + dt);
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const key = name(byId.get(at)!);
      if (!seen.has(key)) inclusive.set(key, (inclusive.get(key) ?? 0) + dt);
      seen.add(key);
    }
  });
  const list = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, t]) => `  ${((100 * t) / total).toFixed(1).padStart(5)}%  ${k}`)
      .join("\n");
  return `${(total / 1e6).toFixed(1)} s profiled\nself:\n${list(self)}\ninclusive:\n${list(inclusive)}`;
}

/** A CDP session with one of a workerd's inspector targets. */
export interface Inspector {
  send<T>(method: string, params?: object): Promise<T>;
  close(): void;
}

/** Opens the first target on the inspector at `port` whose title `title` takes. */
export async function inspect(port: number, title: (t: string) => boolean): Promise<Inspector> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as {
    title: string;
    webSocketDebuggerUrl: string;
  }[];
  const target = targets.find((t) => title(t.title));
  if (!target) throw new Error(`no inspector target among: ${targets.map((t) => t.title).join(", ")}`);
  if (typeof WebSocket === "undefined") throw new Error("Run with NODE_OPTIONS=--experimental-websocket (Node 20).");
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve, { once: true });
    ws.addEventListener("error", reject, { once: true });
  });
  let seq = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  ws.addEventListener("message", (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
    if (message.id !== undefined) waiting.get(message.id)?.(message.result);
  });
  return {
    send: <T>(method: string, params: object = {}) =>
      new Promise<T>((resolve) => {
        waiting.set(++seq, resolve as (r: unknown) => void);
        ws.send(JSON.stringify({ id: seq, method, params }));
      }),
    close: () => ws.close(),
  };
}
