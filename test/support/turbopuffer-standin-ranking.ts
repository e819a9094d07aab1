/**
 * How the Turbopuffer stand-in (`turbopuffer-standin.ts`, a LOCAL STAND-IN for tests only) ranks and
 * filters a query's documents, and the request checks both halves share.
 */

export interface StandInDocument {
  id: string | number;
  vector?: number[];
  attributes: Record<string, unknown>;
}

export type Metric = "cosine_distance" | "euclidean_squared";
export interface Attribute {
  type: string;
  filterable: boolean;
  fts?: { tokenizer: string; k1: number; b: number };
}
export interface Namespace {
  idType?: "string" | "uint";
  dims?: number;
  metric?: Metric;
  attributes: Map<string, Attribute>;
  docs: Map<string, StandInDocument>;
}
export type Json = Record<string, unknown>;
export type Predicate = (doc: StandInDocument) => boolean;

/** A request refused with a Turbopuffer-style error. */
export class Rejection extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
export const reject = (status: number, message: string): never => {
  throw new Rejection(status, message);
};

export function rank(
  ns: Namespace,
  rankBy: unknown,
  docs: StandInDocument[],
): Array<{ doc: StandInDocument; dist: number }> {
  const spec = array(rankBy ?? reject(400, "rank_by is required"), "rank_by");
  const [attr, fn, input] = spec;
  const byId = (a: StandInDocument, b: StandInDocument) => (String(a.id) < String(b.id) ? -1 : 1);
  if (fn === "ANN" && spec.length === 3) {
    if (attr !== "vector") reject(400, `ANN ranks by the vector attribute, not ${String(attr)}`);
    const q = array(input, "rank_by vector");
    if (q.length !== ns.dims || !q.every((x) => typeof x === "number" && Number.isFinite(x))) {
      reject(400, `query vector must have ${String(ns.dims)} numbers, got ${q.length}`);
    }
    const dist = distance(ns.metric ?? reject(400, "namespace has no distance metric"), q as number[]);
    return docs
      .filter((d) => d.vector)
      .map((doc) => ({ doc, dist: dist(doc.vector!) }))
      .sort((a, b) => a.dist - b.dist || byId(a.doc, b.doc));
  }
  // A text ranking: a BM25 clause, or Sum, Max or Product of them. A document that no BM25 clause
  // matches is not returned.
  const query = { chars: 0 };
  const score = textScore(ns, spec, query);
  // Turbopuffer refuses a full-text query over 1,024 characters. How it counts a pre-tokenized
  // array is not documented, so the stand-in counts the strictest way: every clause's tokens, joined
  // by spaces, as one query.
  if (query.chars > MAX_QUERY_CHARS) {
    reject(400, `full-text query is ${query.chars} characters; the limit is ${MAX_QUERY_CHARS}`);
  }
  return docs
    .map((doc) => ({ doc, ...score(doc) }))
    .filter((r) => r.matched)
    .map(({ doc, dist }) => ({ doc, dist }))
    .sort((a, b) => b.dist - a.dist || byId(a.doc, b.doc));
}

type TextScore = (doc: StandInDocument) => { dist: number; matched: boolean };

const MAX_QUERY_CHARS = 1024;

/**
 * `[attr, "BM25", query]`, `["Sum", [expr, …]]`, `["Max", [expr, …]]`, `["Product", weight, expr]`
 * or `["Product", expr, weight]`, checked as Turbopuffer checks them.
 */
function textScore(ns: Namespace, spec: unknown[], query: { chars: number }): TextScore {
  const [head, second, third, params] = spec;
  if ((head === "Sum" || head === "Max") && spec.length === 2) {
    const parts = array(second, `${head} operands`).map((part) => textScore(ns, array(part, `${head} operand`), query));
    if (parts.length === 0) reject(400, `${head} needs at least one operand`);
    return (doc) => {
      const scored = parts.map((part) => part(doc));
      const dists = scored.map((s) => s.dist);
      return {
        dist: head === "Sum" ? dists.reduce((a, b) => a + b, 0) : Math.max(...dists),
        matched: scored.some((s) => s.matched),
      };
    };
  }
  if (head === "Product" && spec.length === 3) {
    const [weight, operand] = typeof second === "number" ? [second, third] : [third, second];
    if (typeof weight !== "number" || !Number.isFinite(weight)) {
      return reject(400, "Product needs a finite number and a ranking expression");
    }
    const inner = textScore(ns, array(operand, "Product operand"), query);
    return (doc) => {
      const { dist, matched } = inner(doc);
      return { dist: weight * dist, matched };
    };
  }
  if (second === "BM25" && typeof head === "string" && (spec.length === 3 || spec.length === 4)) {
    if (params !== undefined) reject(400, "BM25 clause parameters are not supported by the stand-in");
    const fts = ns.attributes.get(head)?.fts ?? reject(400, `attribute ${head} is not configured for full-text search`);
    const pre = fts.tokenizer === "pre_tokenized_array";
    if (pre && !(Array.isArray(third) && third.every((t) => typeof t === "string"))) {
      reject(400, "BM25 over a pre_tokenized_array attribute needs an array of string tokens");
    }
    if (!pre && typeof third !== "string") reject(400, "BM25 query must be a string");
    const tokenize = (value: unknown): string[] =>
      pre
        ? ((value as string[] | null) ?? [])
        : [value ?? []].flat().flatMap(
            (s) =>
              String(s)
                .toLowerCase()
                .match(/[\p{L}\p{N}]+/gu) ?? [],
          );
    const score = bm25(
      fts,
      [...ns.docs.values()].map((d) => tokenize(d.attributes[head])),
    );
    const queryTokens = tokenize(third);
    query.chars += pre ? (third as string[]).join(" ").length : (third as string).length;
    return (doc) => {
      const dist = score(tokenize(doc.attributes[head]), queryTokens);
      return { dist, matched: dist > 0 };
    };
  }
  return reject(400, `unsupported rank_by: ${JSON.stringify(spec).slice(0, 200)}`);
}

export function predicate(ns: Namespace, filter: unknown): Predicate {
  const f = array(filter, "filters");
  const [head, op, value] = f;
  if ((head === "And" || head === "Or") && f.length === 2) {
    const parts = array(op, `${head} operands`).map((part) => predicate(ns, part));
    if (parts.length === 0) reject(400, `${head} needs at least one filter`);
    return head === "And" ? (d) => parts.every((p) => p(d)) : (d) => parts.some((p) => p(d));
  }
  if (head === "Not" && f.length === 2) {
    const inner = predicate(ns, op);
    return (d) => !inner(d);
  }
  if (typeof head !== "string" || f.length !== 3) return reject(400, `malformed filter: ${JSON.stringify(filter)}`);
  const get = (d: StandInDocument) => (head === "id" ? d.id : (d.attributes[head] ?? null));
  if (head !== "id") {
    const attribute = ns.attributes.get(head) ?? reject(400, `filter on unknown attribute ${head}`);
    if (!attribute.filterable) reject(400, `attribute ${head} is not filterable`);
  }
  const scalar = (v: unknown) => v === null || ["string", "number", "boolean"].includes(typeof v);
  switch (op) {
    case "Eq":
    case "NotEq":
      if (!scalar(value)) reject(400, `${op} needs a scalar value`);
      return op === "Eq" ? (d) => get(d) === value : (d) => get(d) !== value;
    case "In":
    case "NotIn": {
      const values = array(value, `${op} values`);
      return op === "In" ? (d) => values.includes(get(d)) : (d) => !values.includes(get(d));
    }
    case "Glob":
    case "NotGlob": {
      if (typeof value !== "string") return reject(400, `${op} needs a string pattern`);
      const pattern = globRegExp(value);
      const matches = (d: StandInDocument) => {
        const v = get(d);
        return typeof v === "string" && pattern.test(v);
      };
      return op === "Glob" ? matches : (d) => !matches(d);
    }
    default:
      return reject(400, `unsupported filter operator: ${String(op)}`);
  }
}

export function object(value: unknown, what: string): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) reject(400, `${what} must be an object`);
  return value as Json;
}

export function array(value: unknown, what: string): unknown[] {
  return Array.isArray(value) ? value : reject(400, `${what} must be an array`);
}

export function unknownFields(body: Json, known: ReadonlySet<string>, what: string): void {
  for (const key of Object.keys(body)) if (!known.has(key)) reject(400, `unknown field in ${what}: \`${key}\``);
}

function distance(metric: Metric, q: number[]): (v: number[]) => number {
  if (metric === "euclidean_squared") return (v) => v.reduce((sum, x, i) => sum + (x - q[i]!) ** 2, 0);
  const qNorm = Math.hypot(...q);
  return (v) => {
    const norms = qNorm * Math.hypot(...v);
    return norms === 0 ? 1 : 1 - v.reduce((sum, x, i) => sum + x * q[i]!, 0) / norms;
  };
}

/** Okapi BM25 over the namespace's documents (`corpus`, one token list each). */
function bm25(params: { k1: number; b: number }, corpus: string[][]) {
  const docFreq = new Map<string, number>();
  for (const tokens of corpus) for (const t of new Set(tokens)) docFreq.set(t, (docFreq.get(t) ?? 0) + 1);
  const n = corpus.length;
  const avgLength = corpus.reduce((sum, t) => sum + t.length, 0) / Math.max(n, 1) || 1;
  return (doc: string[], queryTokens: string[]): number => {
    const tf = new Map<string, number>();
    for (const t of doc) tf.set(t, (tf.get(t) ?? 0) + 1);
    let score = 0;
    for (const t of queryTokens) {
      const f = tf.get(t) ?? 0;
      if (f === 0) continue;
      const df = docFreq.get(t) ?? 0;
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      score += (idf * f * (params.k1 + 1)) / (f + params.k1 * (1 - params.b + (params.b * doc.length) / avgLength));
    }
    return score;
  };
}

/** `**` matches anything, `*` anything but `/`, `?` one character but `/`; the rest is literal. */
function globRegExp(glob: string): RegExp {
  const source = glob
    .split(/(\*\*|\*|\?)/)
    .map((part) =>
      part === "**"
        ? ".*"
        : part === "*"
          ? "[^/]*"
          : part === "?"
            ? "[^/]"
            : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
    )
    .join("");
  return new RegExp(`^${source}$`, "s");
}
