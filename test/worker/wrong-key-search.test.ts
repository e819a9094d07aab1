import { describe, expect, it } from "vitest";
import { SearchResponse, SYNC_PROTOCOL, VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import { call, createAccount, expectJson, hex, seg, type Account } from "./harness.js";

/** Forty small functions, each with the question a developer would ask to find it. */
const CORPUS: { code: string; query: string }[] = [
  {
    query: "parse a json file",
    code: "export function parseJsonFile(path: string) {\n  return JSON.parse(readFileSync(path, 'utf8'));\n}",
  },
  {
    query: "read the lines of a file",
    code: "export async function readFileLines(path: string) {\n  const text = await fs.readFile(path, 'utf8');\n  return text.split('\\n');\n}",
  },
  {
    query: "write a buffer to a stream",
    code: "export function writeBuffer(stream: Writable, buffer: Uint8Array) {\n  return new Promise((done) => stream.write(buffer, done));\n}",
  },
  {
    query: "remove a key from the cache",
    code: "export function removeCacheKey(cache: Map<string, unknown>, key: string) {\n  cache.delete(key);\n  evictions++;\n}",
  },
  {
    query: "delete a node from the tree",
    code: "function deleteTreeNode(tree: Tree, node: TreeNode) {\n  const parent = node.parent;\n  parent.children = parent.children.filter((c) => c !== node);\n}",
  },
  { query: "add two numbers", code: "export const addNumbers = (a: number, b: number): number => a + b;" },
  {
    query: "subtract dates",
    code: "export function subDates(a: Date, b: Date) {\n  return a.getTime() - b.getTime();\n}",
  },
  {
    query: "map over an array",
    code: "export function mapArray<T, U>(array: T[], fn: (item: T) => U): U[] {\n  const out = [];\n  for (const item of array) out.push(fn(item));\n  return out;\n}",
  },
  {
    query: "filter a list",
    code: "export function filterList<T>(list: T[], keep: (item: T) => boolean) {\n  return list.filter(keep);\n}",
  },
  {
    query: "reduce an array to a value",
    code: "export function reduceArray<T, A>(array: T[], step: (acc: A, item: T) => A, value: A) {\n  for (const item of array) value = step(value, item);\n  return value;\n}",
  },
  {
    query: "format a string",
    code: "export function formatString(template: string, args: Record<string, string>) {\n  return template.replace(/\\{(\\w+)\\}/g, (_, k) => args[k] ?? '');\n}",
  },
  {
    query: "parse a number",
    code: "export function parseNumber(text: string): number {\n  const n = Number(text.trim());\n  if (Number.isNaN(n)) throw new RangeError(text);\n  return n;\n}",
  },
  {
    query: "error response for a request",
    code: "export function errorResponse(request: Request, status: number) {\n  return new Response(JSON.stringify({ status, url: request.url }), { status });\n}",
  },
  {
    query: "stream the response",
    code: "async function* streamResponse(response: Response) {\n  const reader = response.body!.getReader();\n  for (;;) { const { done, value } = await reader.read(); if (done) return; yield value; }\n}",
  },
  {
    query: "join a url path",
    code: "export function joinUrlPath(base: string, path: string) {\n  return new URL(path.replace(/^\\//, ''), base.endsWith('/') ? base : base + '/').toString();\n}",
  },
  {
    query: "send an http request",
    code: "export async function sendHttpRequest(url: string, init: RequestInit) {\n  const res = await fetch(url, init);\n  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res;\n}",
  },
  {
    query: "get a value by key",
    code: "export function valueForKey(table: Record<string, number>, key: string) {\n  return Object.hasOwn(table, key) ? table[key] : undefined;\n}",
  },
  {
    query: "merge two sorted lists",
    code: "export function mergeSortedLists(a: number[], b: number[]) {\n  const out = []; let i = 0, j = 0;\n  while (i < a.length || j < b.length) out.push(j >= b.length || a[i] < b[j] ? a[i++] : b[j++]);\n  return out;\n}",
  },
  {
    query: "sort an array",
    code: "export function sortArray(values: number[]) {\n  return [...values].sort((x, y) => x - y);\n}",
  },
  {
    query: "find the index of an item",
    code: "export function findIndex<T>(items: T[], wanted: T) {\n  for (let i = 0; i < items.length; i++) if (items[i] === wanted) return i;\n  return -1;\n}",
  },
  {
    query: "walk a graph",
    code: "export function walkGraph(graph: Map<string, string[]>, start: string) {\n  const seen = new Set([start]); const queue = [start];\n  while (queue.length) for (const next of graph.get(queue.shift()!) ?? []) if (!seen.has(next)) { seen.add(next); queue.push(next); }\n  return seen;\n}",
  },
  {
    query: "union of two sets",
    code: "export function union<T>(a: Set<T>, b: Set<T>) {\n  return new Set([...a, ...b]);\n}",
  },
  {
    query: "compare if equal",
    code: "export function deepEqual(a: unknown, b: unknown): boolean {\n  return JSON.stringify(a) === JSON.stringify(b);\n}",
  },
  {
    query: "compare versions",
    code: "export function compareVersions(a: string, b: string) {\n  const x = a.split('.').map(Number), y = b.split('.').map(Number);\n  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] - y[i];\n  return 0;\n}",
  },
  {
    query: "format a date and time",
    code: "export function formatDateTime(date: Date) {\n  return `${date.toISOString().slice(0, 10)} ${date.toTimeString().slice(0, 8)}`;\n}",
  },
  {
    query: "time a function",
    code: "export async function timeIt(fn: () => Promise<void>) {\n  const start = performance.now();\n  await fn();\n  return performance.now() - start;\n}",
  },
  {
    query: "buffer to string",
    code: "export function bufferToString(buffer: ArrayBuffer) {\n  return new TextDecoder().decode(buffer);\n}",
  },
  {
    query: "list files in a path",
    code: "export async function listFiles(path: string) {\n  return (await fs.readdir(path, { withFileTypes: true })).filter((e) => e.isFile()).map((e) => e.name);\n}",
  },
  {
    query: "cache the response of a request",
    code: "export async function cachedResponse(cache: Cache, request: Request) {\n  return (await cache.match(request)) ?? fetch(request).then((r) => (cache.put(request, r.clone()), r));\n}",
  },
  {
    query: "parse a url",
    code: "export function parseUrl(text: string) {\n  try { return new URL(text); } catch { return null; }\n}",
  },
  {
    query: "index the nodes of a tree",
    code: "export function indexTreeNodes(root: TreeNode) {\n  const index = new Map<string, TreeNode>();\n  const visit = (n: TreeNode) => { index.set(n.id, n); n.children.forEach(visit); };\n  visit(root);\n  return index;\n}",
  },
  {
    query: "write json to a file",
    code: "export async function writeJsonFile(path: string, value: unknown) {\n  await fs.writeFile(path, JSON.stringify(value, null, 2));\n}",
  },
  {
    query: "remove an item from an array",
    code: "export function removeItem<T>(array: T[], item: T) {\n  const at = array.indexOf(item);\n  if (at >= 0) array.splice(at, 1);\n}",
  },
  {
    query: "map keys to values",
    code: "export function keysToValues(keys: string[], lookup: (key: string) => number) {\n  return new Map(keys.map((key) => [key, lookup(key)]));\n}",
  },
  {
    query: "find a path in a graph",
    code: "export function findGraphPath(graph: Graph, from: string, to: string): string[] | null {\n  if (from === to) return [to];\n  for (const next of graph.edges(from)) { const rest = findGraphPath(graph, next, to); if (rest) return [from, ...rest]; }\n  return null;\n}",
  },
  {
    query: "http error status",
    code: "export class HttpError extends Error {\n  constructor(readonly status: number, message: string) { super(message); }\n}",
  },
  {
    query: "read a stream into a buffer",
    code: "export async function readStreamBuffer(stream: ReadableStream<Uint8Array>) {\n  return new Uint8Array(await new Response(stream).arrayBuffer());\n}",
  },
  {
    query: "sort a list by date",
    code: "export function sortByDate<T extends { date: Date }>(list: T[]) {\n  return list.toSorted((a, b) => a.date.getTime() - b.date.getTime());\n}",
  },
  {
    query: "add a node to a graph",
    code: "export function addGraphNode(graph: Map<string, string[]>, node: string) {\n  if (!graph.has(node)) graph.set(node, []);\n}",
  },
  {
    query: "filter the keys of a json object",
    code: "export function filterJsonKeys(json: Record<string, unknown>, keep: string[]) {\n  return Object.fromEntries(Object.entries(json).filter(([key]) => keep.includes(key)));\n}",
  },
];

const N = CORPUS.length;
/** A uniformly random ranking's expected reciprocal rank of one target among N: H(N) / N. */
const CHANCE_MRR = Array.from({ length: N }, (_, i) => 1 / (i + 1)).reduce((a, b) => a + b) / N;

/** Fixed keys, so the test is the same every run. */
const keyOf = (fill: number) =>
  btoa(String.fromCharCode(...new Uint8Array(32).fill(fill)))
    .replace(/=+$/, "")
    .replace(/\+/g, "-")
    .replace(/\//g, "_");
const RIGHT = keyOf(7);
const WRONG = keyOf(201);
const pathOf = (i: number) => `${seg("s")}/${`f${i}`.padEnd(43, "q")}`;

async function indexCorpus(account: Account): Promise<string> {
  const created = await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } });
  const { id } = (await created.json()) as { id: string };
  const upserts = CORPUS.map(({ code }, i) => ({
    path: pathOf(i),
    hash: hex("1").slice(0, 60) + i.toString(16).padStart(4, "0"),
    size: code.length,
    language: "typescript",
    chunks: [
      {
        id: hex("a").slice(0, 60) + i.toString(16).padStart(4, "0"),
        text: code,
        startLine: 1,
        endLine: code.split("\n").length,
      },
    ],
  }));
  const response = await call(`/v1/workspaces/${id}/tree/commit`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, upserts },
    headers: { "Sextant-Vector-Key": RIGHT },
  });
  expect(response.status, await response.clone().text()).toBe(200);
  return id;
}

interface Ranks {
  /** 1-based rank of each query's target in the fused results. */
  fused: number[];
  /** 1-based rank of each query's target by the vector channel's own score. */
  vector: number[];
  /** Whether any hit came from the lexical channel. */
  lexical: boolean;
}

async function ranks(account: Account, id: string, vectorKey: string): Promise<Ranks> {
  const out: Ranks = { fused: [], vector: [], lexical: false };
  for (const [i, { query }] of CORPUS.entries()) {
    const answer = await expectJson(
      await call(`/v1/workspaces/${id}/search`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, query, topK: N },
        headers: { [VECTOR_KEY_HEADER]: vectorKey },
      }),
      200,
      SearchResponse,
    );
    // Every chunk comes back (the vector channel returns at least 50 candidates), so no rank is missing.
    expect(answer.results).toHaveLength(N);
    const rankOf = (paths: string[]) => paths.indexOf(pathOf(i)) + 1;
    out.fused.push(rankOf(answer.results.map((r) => r.path)));
    const byVector = answer.results.toSorted((a, b) => b.channels.vector! - a.channels.vector!);
    out.vector.push(rankOf(byVector.map((r) => r.path)));
    out.lexical ||= answer.results.some((r) => r.channels.lexical !== null);
  }
  return out;
}

const mrr = (ranks: number[]) => ranks.reduce((s, r) => s + 1 / r, 0) / ranks.length;

describe("searching with the wrong vector key", () => {
  it("ranks the target near the top with the right key and no better than chance with another", async () => {
    const account = await createAccount({ plan: "pro" });
    const id = await indexCorpus(account);

    const right = await ranks(account, id, RIGHT);
    expect(right.lexical).toBe(true);
    expect(mrr(right.fused)).toBeGreaterThan(0.6);
    // The vector channel alone finds the target too: the model's vectors, not only the keyed terms.
    expect(mrr(right.vector)).toBeGreaterThan(3 * CHANCE_MRR);

    const wrong = await ranks(account, id, WRONG);
    // The lexical channel's terms are keyed by a key derived from the vector key: another key's
    // query terms are other ids, and the channel finds nothing.
    expect(wrong.lexical).toBe(false);
    // Chance is H(40)/40 ≈ 0.107, and the mean of 40 reciprocal ranks of a uniform ranking has a
    // standard deviation of about 0.027: 0.25 is more than five of them above chance, where the
    // right key's vector channel sits far higher.
    expect(CHANCE_MRR).toBeCloseTo(0.107, 3);
    expect(mrr(wrong.vector)).toBeLessThan(0.25);

    // The translation channel's terms are keyed the same way: with another key it finds nothing either.
    const translated = async (vectorKey: string) =>
      expectJson(
        await call(`/v1/workspaces/${id}/search`, {
          token: account.key.key,
          body: {
            protocol: SYNC_PROTOCOL,
            query: "zqxjv",
            topK: N,
            translations: [
              { term: "zqxjv", alternatives: ["graph", "buffer", "json"], probabilities: [0.4, 0.3, 0.3] },
            ],
          },
          headers: { [VECTOR_KEY_HEADER]: vectorKey },
        }),
        200,
        SearchResponse,
      );
    const found = (await translated(RIGHT)).results.filter((r) => typeof r.channels.translation === "number");
    expect(found.length).toBeGreaterThan(5);
    expect((await translated(WRONG)).results).toEqual([]);
  });
});
