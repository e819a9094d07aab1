import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync, gzipSync } from "node:zlib";
import {
  array,
  object,
  predicate,
  rank,
  reject,
  Rejection,
  unknownFields,
  type Attribute,
  type Json,
  type Metric,
  type Namespace,
  type Predicate,
  type StandInDocument,
} from "./turbopuffer-standin-ranking.js";

export type { StandInDocument };

/**
 * A LOCAL STAND-IN for the hosted Turbopuffer service, for tests only: it is not Turbopuffer and
 * says nothing about the real service's performance or ranking beyond what is written here.
 *
 * It speaks the part of Turbopuffer's v2 HTTP API that `@turbopuffer/turbopuffer` sends for
 * `namespace(ns).write(...)`, `.query(...)` and `.deleteAll()`:
 *   POST /v2/namespaces/:ns        upsert_rows | upsert_columns, deletes, distance_metric, schema
 *   POST /v2/namespaces/:ns/query  rank_by (ANN over `vector`; BM25 over a full-text attribute, and
 *                                  Sum, Max and Product of BM25 clauses),
 *                                  top_k, filters, include_attributes, consistency
 *   DELETE /v2/namespaces/:ns
 * with bodies gzipped or not (`content-encoding`), and gzipped answers when the client accepts
 * them. It never applies the client's `prefer: respond-async`, so every answer is synchronous.
 *
 * It checks what it receives and answers like Turbopuffer, `{ "status": "error", "error": "…" }`
 * with a 4xx, for: a missing or wrong `Authorization: Bearer <key>`, an unknown route or query
 * parameter, a body that is not JSON, an unknown field (anywhere in a write, query or schema), a
 * vector of the wrong dimension for the namespace, an attribute value of the wrong type, mixed id
 * types, a missing distance metric, malformed `rank_by` or filters (unknown operators, wrong arity,
 * attributes that are not filterable), and a query or delete of a namespace that does not exist.
 *
 * Ranking is exact: vectors by brute force (cosine distance or squared euclidean, ascending), BM25
 * with k1 = 1.2 and b = 0.75 (or the schema's), IDF over the whole namespace, duplicate query
 * tokens counted each time. Glob filters support `*` (no `/`), `**` and `?`; everything else in a
 * pattern is literal. Every request, accepted or not, is recorded in `requests`.
 */
export interface TurbopufferStandIn {
  /** Pass as the client's `baseURL`. */
  readonly url: string;
  readonly apiKey: string;
  readonly requests: RecordedRequest[];
  /** The documents a namespace holds, or undefined when it does not exist. */
  documents(namespace: string): StandInDocument[] | undefined;
  /** Answers the next `count` requests with `status` and an error body, e.g. to exercise retries. */
  failNext(count: number, status: number): void;
  close(): Promise<void>;
}

export interface RecordedRequest {
  method: string;
  /** Path and query string, as sent. */
  url: string;
  /** Lower-cased names. */
  headers: Record<string, string>;
  /** Body bytes on the wire, before any gunzip. */
  bytes: number;
  /** The body, decompressed and parsed; undefined when there was none or it was not JSON. */
  body: unknown;
  status: number;
  /** The message of a rejected request. */
  error?: string;
}

const NAMESPACE_NAME = /^[A-Za-z0-9\-_.]{1,128}$/;
const MAX_TOP_K = 1200;
const WRITE_FIELDS = new Set(["upsert_rows", "upsert_columns", "deletes", "distance_metric", "schema"]);
const QUERY_FIELDS = new Set(["rank_by", "top_k", "filters", "include_attributes", "distance_metric", "consistency"]);
const SCHEMA_FIELDS = new Set(["type", "filterable", "full_text_search", "ann", "glob", "regex"]);
const FTS_FIELDS = new Set(["tokenizer", "language", "stemming", "remove_stopwords", "case_sensitive", "k1", "b"]);
const TOKENIZERS = new Set(["pre_tokenized_array", "word_v0", "word_v1", "word_v2", "word_v3", "word_v4"]);
const ATTRIBUTE_TYPES = new Set(["string", "int", "uint", "float", "bool", "[]string", "[]int", "[]uint"]);
const VECTOR_TYPE = /^\[(\d+)\]f(?:32|16)$/;
const METRICS = new Set<string>(["cosine_distance", "euclidean_squared"]);

/** Starts the stand-in on a free port of 127.0.0.1; it accepts only `apiKey`. */
export async function startTurbopufferStandIn(options: { apiKey?: string } = {}): Promise<TurbopufferStandIn> {
  const apiKey = options.apiKey ?? "tpuf_standin_" + Math.random().toString(36).slice(2);
  const namespaces = new Map<string, Namespace>();
  const requests: RecordedRequest[] = [];
  let failures: { count: number; status: number } = { count: 0, status: 500 };

  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      res.statusCode = 500;
      res.end(JSON.stringify({ status: "error", error: String(err) }));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    const record: RecordedRequest = {
      method: req.method ?? "",
      url: req.url ?? "",
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
      bytes: raw.length,
      body: undefined,
      status: 0,
    };
    requests.push(record);
    let status = 200;
    let answer: unknown;
    try {
      record.body = decodeBody(req, raw);
      if (failures.count > 0) {
        failures.count--;
        reject(failures.status, "injected failure");
      }
      answer = route(req, record.body);
    } catch (err) {
      if (!(err instanceof Rejection)) throw err;
      status = err.status;
      record.error = err.message;
      answer = { status: "error", error: err.message };
    }
    record.status = status;
    let payload: Buffer = Buffer.from(JSON.stringify(answer));
    res.statusCode = status;
    res.setHeader("content-type", "application/json");
    if (/\bgzip\b/.test(String(req.headers["accept-encoding"] ?? "")) && payload.length > 1024) {
      payload = gzipSync(payload);
      res.setHeader("content-encoding", "gzip");
    }
    res.end(payload);
  }

  function decodeBody(req: IncomingMessage, raw: Buffer): unknown {
    if (raw.length === 0) return undefined;
    const encoding = req.headers["content-encoding"] ?? "identity";
    if (encoding !== "gzip" && encoding !== "identity") reject(415, `unsupported content-encoding: ${encoding}`);
    let text: string;
    try {
      text = (encoding === "gzip" ? gunzipSync(raw) : raw).toString("utf8");
    } catch {
      return reject(400, "request body is not valid gzip");
    }
    if (!/^application\/json\b/.test(req.headers["content-type"] ?? "")) {
      reject(415, "request body must be application/json");
    }
    try {
      return JSON.parse(text);
    } catch {
      return reject(400, "request body is not valid JSON");
    }
  }

  function route(req: IncomingMessage, body: unknown): unknown {
    const auth = req.headers.authorization;
    if (!auth) reject(401, "missing Authorization header: expected `Bearer <api key>`");
    if (auth !== `Bearer ${apiKey}`) reject(401, "unauthorized: invalid API key");
    const url = new URL(req.url ?? "/", "http://stand-in");
    if (url.search) reject(400, `unknown query parameter(s): ${url.search}`);
    const match = /^\/v2\/namespaces\/([^/]+)(\/query)?$/.exec(url.pathname);
    if (!match) return reject(404, `no route for ${req.method} ${url.pathname}`);
    const name = decodeURIComponent(match[1]!);
    if (!NAMESPACE_NAME.test(name)) reject(400, `invalid namespace name: ${name}`);
    const key = `${req.method} ${match[2] ?? ""}`;
    if (key === "POST ") return write(name, object(body, "write body"));
    if (key === "POST /query") return query(existing(name), object(body, "query body"));
    if (key === "DELETE ") {
      existing(name);
      namespaces.delete(name);
      return { status: "OK" };
    }
    return reject(405, `method ${req.method} not allowed on ${url.pathname}`);
  }

  function existing(name: string): Namespace {
    return namespaces.get(name) ?? reject(404, `namespace '${name}' was not found`);
  }

  function write(name: string, body: Json): unknown {
    unknownFields(body, WRITE_FIELDS, "write");
    const current = namespaces.get(name);
    const upserting = body.upsert_rows !== undefined || body.upsert_columns !== undefined;
    if (!upserting && body.deletes === undefined) reject(400, "write has no upserts or deletes");
    if (!current && !upserting) reject(404, `namespace '${name}' was not found`);
    // Validate into a copy, so that a rejected write changes nothing.
    const ns: Namespace = {
      ...(current ?? { docs: new Map() }),
      attributes: new Map(current?.attributes ?? []),
    };
    if (body.distance_metric !== undefined) {
      const metric = body.distance_metric;
      if (typeof metric !== "string" || !METRICS.has(metric)) reject(400, `invalid distance_metric: ${String(metric)}`);
      if (ns.metric && ns.metric !== metric) reject(400, `namespace uses ${ns.metric}, not ${String(metric)}`);
      ns.metric = metric as Metric;
    }
    if (body.schema !== undefined) {
      for (const [attr, config] of Object.entries(object(body.schema, "schema"))) applySchema(ns, attr, config);
    }
    const rows = [...rowsOf(body.upsert_rows), ...columnsOf(body.upsert_columns)];
    const upserts = rows.map((row) => document(ns, row));
    if (upserts.some((d) => d.vector) && !ns.metric) reject(400, "distance_metric is required when writing vectors");
    const deletes = body.deletes === undefined ? [] : array(body.deletes, "deletes").map((id) => docKey(ns, id));
    ns.docs = new Map(ns.docs);
    for (const doc of upserts) ns.docs.set(docKey(ns, doc.id), doc);
    let deleted = 0;
    for (const key of deletes) if (ns.docs.delete(key)) deleted++;
    namespaces.set(name, ns);
    return {
      status: "OK",
      message: `${upserts.length + deleted} rows affected`,
      rows_affected: upserts.length + deleted,
      rows_upserted: upserts.length,
      rows_deleted: deleted,
      billing: { billable_logical_bytes_written: 0 },
    };
  }

  function applySchema(ns: Namespace, attr: string, config: unknown): void {
    const spec = typeof config === "string" ? { type: config } : object(config, `schema.${attr}`);
    unknownFields(spec, SCHEMA_FIELDS, `schema.${attr}`);
    const type = spec.type;
    if (typeof type !== "string") return reject(400, `schema.${attr}.type is required`);
    const before = ns.attributes.get(attr);
    if (before && before.type !== type)
      reject(400, `attribute ${attr} has type ${before.type}, cannot change to ${type}`);
    if (attr === "vector") {
      const dims = VECTOR_TYPE.exec(type);
      if (!dims) reject(400, `schema.vector.type must be [DIMS]f32 or [DIMS]f16, got ${type}`);
      const n = Number(dims![1]);
      if (ns.dims !== undefined && ns.dims !== n) reject(400, `namespace has ${ns.dims} dimensions, not ${n}`);
      ns.dims = n;
      if (typeof spec.ann === "object" && spec.ann !== null) {
        unknownFields(spec.ann as Json, new Set(["distance_metric"]), `schema.vector.ann`);
      }
      ns.attributes.set(attr, { type, filterable: false });
      return;
    }
    if (!ATTRIBUTE_TYPES.has(type)) reject(400, `unsupported type for ${attr}: ${type}`);
    let fts: Attribute["fts"];
    if (spec.full_text_search !== undefined && spec.full_text_search !== false) {
      if (type !== "string" && type !== "[]string")
        reject(400, `full_text_search needs string or []string, not ${type}`);
      const options =
        spec.full_text_search === true ? {} : object(spec.full_text_search, `schema.${attr}.full_text_search`);
      unknownFields(options, FTS_FIELDS, `schema.${attr}.full_text_search`);
      const tokenizer = options.tokenizer ?? "word_v4";
      if (typeof tokenizer !== "string" || !TOKENIZERS.has(tokenizer))
        reject(400, `unknown tokenizer: ${String(tokenizer)}`);
      if (tokenizer === "pre_tokenized_array" && type !== "[]string") {
        reject(400, `the pre_tokenized_array tokenizer needs type []string, not ${type}`);
      }
      fts = { tokenizer: tokenizer as string, k1: Number(options.k1 ?? 1.2), b: Number(options.b ?? 0.75) };
    }
    const filterable = spec.filterable === undefined ? !fts : spec.filterable === true;
    ns.attributes.set(attr, { type, filterable, ...(fts && { fts }) });
  }

  function rowsOf(rows: unknown): Json[] {
    return rows === undefined ? [] : array(rows, "upsert_rows").map((row, i) => object(row, `upsert_rows[${i}]`));
  }

  function columnsOf(columns: unknown): Json[] {
    if (columns === undefined) return [];
    const entries = Object.entries(object(columns, "upsert_columns")).map(
      ([name, values]) => [name, array(values, `upsert_columns.${name}`)] as const,
    );
    const ids = entries.find(([name]) => name === "id")?.[1] ?? reject(400, "upsert_columns.id is required");
    for (const [name, values] of entries) {
      if (values.length !== ids.length)
        reject(400, `upsert_columns.${name} has ${values.length} values, id has ${ids.length}`);
    }
    return ids.map((_, i) => Object.fromEntries(entries.map(([name, values]) => [name, values[i]])));
  }

  function document(ns: Namespace, row: Json): StandInDocument {
    const { id, vector, ...attributes } = row;
    docKey(ns, id);
    const doc: StandInDocument = { id: id as string | number, attributes: {} };
    if (vector !== undefined && vector !== null) {
      if (!Array.isArray(vector)) reject(400, `vector of ${String(id)} must be an array of numbers`);
      const values = vector as unknown[];
      if (!values.every((x) => typeof x === "number" && Number.isFinite(x)))
        reject(400, `vector of ${String(id)} has a non-number`);
      ns.dims ??= values.length;
      if (values.length !== ns.dims) {
        reject(400, `vector of ${String(id)} has ${values.length} dimensions, the namespace has ${ns.dims}`);
      }
      doc.vector = values as number[];
    } else if (ns.dims !== undefined) {
      reject(400, `document ${String(id)} has no vector`);
    }
    for (const [name, value] of Object.entries(attributes)) {
      if (name.startsWith("$")) reject(400, `attribute names may not start with $: ${name}`);
      const attribute = ns.attributes.get(name) ?? inferAttribute(ns, name, value);
      if (value !== null && !hasType(value, attribute.type)) {
        reject(400, `attribute ${name} of ${String(id)} is not of type ${attribute.type}`);
      }
      doc.attributes[name] = value;
    }
    return doc;
  }

  function inferAttribute(ns: Namespace, name: string, value: unknown): Attribute {
    const type =
      typeof value === "string"
        ? "string"
        : typeof value === "boolean"
          ? "bool"
          : Number.isInteger(value)
            ? "int"
            : typeof value === "number"
              ? "float"
              : Array.isArray(value) && value.every((v) => typeof v === "string")
                ? "[]string"
                : reject(400, `cannot infer the type of attribute ${name}`);
    const attribute = { type, filterable: true };
    ns.attributes.set(name, attribute);
    return attribute;
  }

  /** Checks an id's type against the namespace's (set by its first id) and returns its map key. */
  function docKey(ns: Namespace, id: unknown): string {
    const type =
      typeof id === "string" && id.length > 0 && Buffer.byteLength(id) <= 64
        ? "string"
        : Number.isSafeInteger(id) && (id as number) >= 0
          ? "uint"
          : reject(400, `invalid document id: ${JSON.stringify(id)}`);
    ns.idType ??= type;
    if (ns.idType !== type) reject(400, `namespace has ${ns.idType} ids, got ${JSON.stringify(id)}`);
    return `${type}:${String(id)}`;
  }

  function query(ns: Namespace, body: Json): unknown {
    unknownFields(body, QUERY_FIELDS, "query");
    const topK = body.top_k;
    if (!Number.isInteger(topK) || (topK as number) < 1 || (topK as number) > MAX_TOP_K) {
      reject(400, `top_k must be an integer from 1 to ${MAX_TOP_K}`);
    }
    if (body.distance_metric !== undefined && body.distance_metric !== ns.metric) {
      reject(400, `namespace uses ${String(ns.metric)}, not ${String(body.distance_metric)}`);
    }
    if (body.consistency !== undefined) {
      const level = object(body.consistency, "consistency");
      unknownFields(level, new Set(["level"]), "consistency");
      if (level.level !== undefined && level.level !== "strong" && level.level !== "eventual") {
        reject(400, `invalid consistency level: ${String(level.level)}`);
      }
    }
    const include = includedAttributes(ns, body.include_attributes);
    const keep: Predicate = body.filters === undefined ? () => true : predicate(ns, body.filters);
    const candidates = [...ns.docs.values()].filter(keep);
    const ranked = rank(ns, body.rank_by, candidates);
    const rows = ranked.slice(0, topK as number).map(({ doc, dist }) => ({
      id: doc.id,
      $dist: dist,
      ...Object.fromEntries(include.filter((a) => a in doc.attributes).map((a) => [a, doc.attributes[a]])),
    }));
    return {
      rows,
      billing: { billable_logical_bytes_queried: 0, billable_logical_bytes_returned: 0 },
      performance: { approx_namespace_size: ns.docs.size, exhaustive_search_count: ns.docs.size, server_total_ms: 0 },
    };
  }

  function includedAttributes(ns: Namespace, include: unknown): string[] {
    if (include === undefined || include === false) return [];
    if (include === true) return [...ns.attributes.keys()].filter((a) => a !== "vector");
    return array(include, "include_attributes").map((a) =>
      typeof a === "string" && ns.attributes.has(a)
        ? a
        : reject(400, `include_attributes: unknown attribute ${String(a)}`),
    );
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    requests,
    documents: (name) => {
      const ns = namespaces.get(name);
      return ns && [...ns.docs.values()];
    },
    failNext: (count, status) => {
      failures = { count, status };
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

function hasType(value: unknown, type: string): boolean {
  if (type.startsWith("[]")) return Array.isArray(value) && value.every((v) => hasType(v, type.slice(2)));
  switch (type) {
    case "string":
      return typeof value === "string";
    case "int":
      return Number.isSafeInteger(value);
    case "uint":
      return Number.isSafeInteger(value) && (value as number) >= 0;
    case "float":
      return typeof value === "number" && Number.isFinite(value);
    case "bool":
      return typeof value === "boolean";
    default:
      return false;
  }
}
