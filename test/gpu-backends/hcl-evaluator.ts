/**
 * An evaluator for the Terraform expressions the checks read: a module's outputs and locals, its
 * variable validations, a resource attribute such as user data. It follows Terraform's semantics
 * for the syntax and functions it knows and throws on anything else, so a check never passes by
 * skipping what it cannot evaluate. Attributes known only after apply (resources, data sources)
 * are errors, or `Unknown` values where a check allows them.
 */
import { resolve } from "node:path";
import { getExpressionAst, type TFExpressionSyntaxTree as Syntax } from "@cdktf/hcl2json";
import { TfModule, templateParts, type Body } from "./hcl.js";

type Node = Syntax.ExpressionType;

export class Unknown {
  constructor(readonly reference: string) {}
  toString(): string {
    return `(known after apply: ${this.reference})`;
  }
}

export type Value = null | boolean | number | string | Unknown | Value[] | { [key: string]: Value };
type Scope = ReadonlyMap<string, Value>;

export interface EvaluatorOptions {
  /** Variable values, as a module call or `-var` would give them. */
  inputs?: Record<string, Value>;
  /** Attributes of resources and data sources evaluate to `Unknown` instead of failing. */
  allowUnknown?: boolean;
}

const asts = new Map<string, Promise<Node | null>>();
function ast(source: string): Promise<Node | null> {
  let cached = asts.get(source);
  if (!cached) asts.set(source, (cached = getExpressionAst("expression.tf", source)));
  return cached;
}

const isObject = (v: Value): v is { [key: string]: Value } =>
  v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Unknown);
const hasUnknown = (v: Value): boolean =>
  v instanceof Unknown || (Array.isArray(v) ? v.some(hasUnknown) : isObject(v) && Object.values(v).some(hasUnknown));

export function equal(a: Value, b: Value): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => equal(x, b[i]!));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && equal(a[k]!, b[k]!));
  }
  return a === b;
}

function text(v: Value): string {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean" || v instanceof Unknown) return String(v);
  throw new Error(`cannot use ${JSON.stringify(v)} as a string`);
}

function num(v: Value): number {
  if (typeof v === "number") return v;
  if (typeof v === "string" && v.trim() !== "" && !Number.isNaN(Number(v))) return Number(v);
  throw new Error(`not a number: ${JSON.stringify(v)}`);
}

function list(v: Value): Value[] {
  if (Array.isArray(v)) return v;
  throw new Error(`not a list: ${JSON.stringify(v)}`);
}

function obj(v: Value): { [key: string]: Value } {
  if (isObject(v)) return v;
  throw new Error(`not an object or map: ${JSON.stringify(v)}`);
}

/** Terraform's jsonencode: object keys in lexical order. */
export function jsonencode(v: Value): string {
  if (Array.isArray(v)) return `[${v.map(jsonencode).join(",")}]`;
  if (isObject(v))
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${jsonencode(v[k]!)}`)
      .join(",")}}`;
  if (v instanceof Unknown) throw new Error(`jsonencode of ${v.reference}, which is known only after apply`);
  return JSON.stringify(v);
}

function regex(pattern: string, subject: string): Value {
  const match = new RegExp(pattern).exec(subject);
  if (!match) throw new Error(`regex ${pattern} does not match ${JSON.stringify(subject)}`);
  return match.length > 1 ? match.slice(1).map((g) => g ?? null) : match[0];
}

/** Functions over evaluated arguments; `try`, `can` and `templatefile` are handled where they are called. */
const FUNCTIONS: Record<string, (...args: Value[]) => Value> = {
  abs: (n) => Math.abs(num(n)),
  alltrue: (l) => list(l).every((v) => v === true),
  anytrue: (l) => list(l).some((v) => v === true),
  base64encode: (s) => Buffer.from(text(s), "utf8").toString("base64"),
  ceil: (n) => Math.ceil(num(n)),
  coalesce: (...args) => {
    const found = args.find((v) => v !== null && v !== "");
    if (found === undefined) throw new Error("coalesce: no non-null, non-empty argument");
    return found;
  },
  concat: (...lists) => lists.flatMap(list),
  contains: (l, v) => list(l).some((x) => equal(x, v)),
  distinct: (l) => list(l).filter((v, i, all) => all.findIndex((x) => equal(x, v)) === i),
  floor: (n) => Math.floor(num(n)),
  flatten: (l) => {
    const flat = (v: Value[]): Value[] => v.flatMap((x) => (Array.isArray(x) ? flat(x) : [x]));
    return flat(list(l));
  },
  join: (sep, l) => list(l).map(text).join(text(sep)),
  jsonencode,
  keys: (m) => Object.keys(obj(m)).sort(),
  length: (v) => (typeof v === "string" ? [...v].length : Array.isArray(v) ? v.length : Object.keys(obj(v)).length),
  lookup: (m, key, ...fallback) => {
    const map = obj(m);
    if (text(key) in map) return map[text(key)]!;
    if (fallback.length) return fallback[0]!;
    throw new Error(`lookup: no key ${JSON.stringify(key)}`);
  },
  lower: (s) => text(s).toLowerCase(),
  max: (...ns) => Math.max(...ns.map(num)),
  merge: (...maps) => Object.assign({}, ...maps.map(obj)),
  min: (...ns) => Math.min(...ns.map(num)),
  one: (l) => {
    const items = list(l);
    if (items.length > 1) throw new Error("one: more than one element");
    return items[0] ?? null;
  },
  regex: (pattern, s) => regex(text(pattern), text(s)),
  replace: (s, search, replacement) => {
    const pattern = /^\/(.*)\/$/.exec(text(search));
    return pattern
      ? text(s).replace(new RegExp(pattern[1]!, "g"), text(replacement))
      : text(s).split(text(search)).join(text(replacement));
  },
  setintersection: (...sets) => list(sets[0]!).filter((v) => sets.every((s) => list(s).some((x) => equal(x, v)))),
  sort: (l) => list(l).map(text).sort(),
  split: (sep, s) => text(s).split(text(sep)),
  tolist: (l) => list(l),
  tonumber: (v) => num(v),
  toset: (l) => [...new Set(list(l).map(text))].sort(),
  tostring: (v) => text(v),
  upper: (s) => text(s).toUpperCase(),
};

const ARITHMETIC: Record<string, (a: Value, b: Value) => Value> = {
  add: (a, b) => num(a) + num(b),
  subtract: (a, b) => num(a) - num(b),
  multiply: (a, b) => num(a) * num(b),
  divide: (a, b) => num(a) / num(b),
  modulo: (a, b) => num(a) % num(b),
  lessThan: (a, b) => num(a) < num(b),
  lessThanOrEqual: (a, b) => num(a) <= num(b),
  greaterThan: (a, b) => num(a) > num(b),
  greaterThanOrEqual: (a, b) => num(a) >= num(b),
  equal: (a, b) => equal(a, b),
  notEqual: (a, b) => !equal(a, b),
  logicalAnd: (a, b) => a === true && b === true,
  logicalOr: (a, b) => a === true || b === true,
};

export class Evaluator {
  private readonly localValues = new Map<string, Promise<Value>>();
  private readonly children = new Map<string, Promise<Evaluator>>();

  constructor(
    readonly module: TfModule,
    readonly options: EvaluatorOptions = {},
  ) {}

  async variable(name: string): Promise<Value> {
    const inputs = this.options.inputs ?? {};
    if (name in inputs) return inputs[name]!;
    const declared = this.module.block("variable", name);
    if (!declared) throw new Error(`var.${name} is not declared in ${this.module.dir}`);
    if (!("default" in declared)) throw new Error(`var.${name} has no value and no default`);
    return this.value(declared.default, new Map());
  }

  local(name: string): Promise<Value> {
    let value = this.localValues.get(name);
    if (!value) {
      const found = this.module.unlabelled("locals").find((l) => name in l.body);
      if (!found) throw new Error(`local.${name} is not defined in ${this.module.dir}`);
      this.localValues.set(name, (value = this.value(found.body[name], new Map())));
    }
    return value;
  }

  output(name: string): Promise<Value> {
    const output = this.module.block("output", name);
    if (!output) throw new Error(`output ${name} is not defined in ${this.module.dir}`);
    return this.value(output.value, new Map());
  }

  /** The messages of the variable validations that fail for this module's inputs. */
  async failedValidations(): Promise<string[]> {
    const failed: string[] = [];
    for (const { name, body } of this.module.blocks("variable"))
      for (const rule of (body.validation ?? []) as Body[])
        if ((await this.value(rule.condition, new Map())) !== true) failed.push(`var.${name}: ${rule.error_message}`);
    return failed;
  }

  /** An attribute of a `for_each` resource for one key, e.g. a launch template's user data. */
  async resourceAttribute(type: string, name: string, attribute: string, key: string): Promise<Value> {
    const resource = this.module.resources("resource").find((r) => r.type === type && r.name === name);
    if (!resource) throw new Error(`resource ${type}.${name} is not defined`);
    const each = obj(await this.value(resource.body.for_each, new Map()));
    if (!(key in each)) throw new Error(`${type}.${name} has no instance ${key}`);
    return this.value(resource.body[attribute], new Map([["each", { key, value: each[key]! }]]));
  }

  async child(name: string): Promise<Evaluator> {
    let child = this.children.get(name);
    if (!child) {
      const call = this.module.block("module", name);
      if (!call) throw new Error(`module.${name} is not called in ${this.module.dir}`);
      child = (async () => {
        const inputs: Record<string, Value> = {};
        for (const [arg, raw] of Object.entries(call))
          if (!["source", "version", "providers", "count", "for_each", "depends_on"].includes(arg))
            inputs[arg] = await this.value(raw, new Map());
        const module = await TfModule.load(resolve(this.module.dir, String(call.source)));
        return new Evaluator(module, { ...this.options, inputs });
      })();
      this.children.set(name, child);
    }
    return child;
  }

  /** A value as hcl2json writes it: literals as JSON, expressions and templates as `${…}` strings. */
  async value(raw: unknown, scope: Scope): Promise<Value> {
    if (typeof raw === "string") return this.template(raw, scope);
    if (Array.isArray(raw)) return Promise.all(raw.map((item) => this.value(item, scope)));
    if (raw !== null && typeof raw === "object") {
      const out: { [key: string]: Value } = {};
      for (const [key, item] of Object.entries(raw)) out[key] = await this.value(item, scope);
      return out;
    }
    if (raw === undefined) throw new Error("missing attribute");
    return raw as Value;
  }

  async template(raw: string, scope: Scope): Promise<Value> {
    const parts = templateParts(raw);
    if (parts.length === 1 && "expression" in parts[0]!) return this.expression(parts[0].expression, scope);
    const values = await Promise.all(
      parts.map((p) => ("literal" in p ? p.literal : this.expression(p.expression, scope))),
    );
    return values.some((v) => v instanceof Unknown) ? new Unknown(raw) : values.map(text).join("");
  }

  async expression(source: string, scope: Scope): Promise<Value> {
    const node = await ast(source);
    if (!node) throw new Error(`cannot parse expression ${source}`);
    return this.node(node, scope);
  }

  private async node(node: Node, scope: Scope): Promise<Value> {
    const at = (i: number) => this.node(node.children[i]!, scope);
    switch (node.type) {
      case "literalValue": {
        const { type, value } = node.meta;
        return type === "number"
          ? Number(value)
          : type === "bool"
            ? value === "true"
            : type === "string"
              ? value
              : null;
      }
      case "template": {
        if (node.children.length === 1) return at(0);
        const parts = await Promise.all(node.children.map((_, i) => at(i)));
        return parts.some((p) => p instanceof Unknown) ? new Unknown(node.meta.value) : parts.map(text).join("");
      }
      case "templateWrap":
        return at(0);
      case "tuple":
        return Promise.all(node.children.map((_, i) => at(i)));
      case "object": {
        const out: { [key: string]: Value } = {};
        for (const [keySource, valueSource] of Object.entries(node.meta.items)) {
          const key = /^[A-Za-z_][A-Za-z0-9_-]*$/.test(keySource)
            ? keySource
            : text(await this.expression(keySource.replace(/^\((.*)\)$/s, "$1"), scope));
          out[key] = await this.expression(valueSource, scope);
        }
        return out;
      }
      case "scopeTraversal":
        return this.traverse(node.meta.traversal, scope);
      case "relativeTraversal":
        return this.steps(await at(0), node.meta.traversal, node.meta.sourceExpression);
      case "index": {
        const [collection, key] = await Promise.all([at(0), at(1)]);
        return this.step(collection, key, node.meta.collectionExpression, true);
      }
      case "conditional": {
        const condition = await at(0);
        if (condition instanceof Unknown) return condition;
        if (typeof condition !== "boolean")
          throw new Error(`condition is not a bool: ${node.meta.conditionExpression}`);
        return at(condition ? 1 : 2);
      }
      case "binaryOp": {
        const op = ARITHMETIC[node.meta.operator];
        if (!op) throw new Error(`unsupported operator ${node.meta.operator}`);
        const [a, b] = await Promise.all([at(0), at(1)]);
        return a instanceof Unknown || b instanceof Unknown ? new Unknown(node.meta.value) : op(a, b);
      }
      case "unaryOp": {
        const v = await at(0);
        if (v instanceof Unknown) return v;
        return node.meta.operator === "negate" ? -num(v) : v !== true;
      }
      case "function":
        return this.call(node, scope);
      case "for":
        return this.forExpression(node.meta, scope);
      default:
        // Parentheses: the parser's untyped wrapper around one expression.
        if ((node.type as string) === "" && node.children.length === 1) return at(0);
        throw new Error(`unsupported expression (${node.type || "?"}): ${"meta" in node ? node.meta?.value : ""}`);
    }
  }

  private async call(node: Syntax.FunctionCallExpression, scope: Scope): Promise<Value> {
    const name = node.meta.name;
    const arg = (i: number) => this.node(node.children[i]!, scope);
    if (name === "try" || name === "can") {
      for (let i = 0; i < node.children.length; i++) {
        try {
          const v = await arg(i);
          return name === "can" ? true : v;
        } catch {
          // The next alternative.
        }
      }
      if (name === "can") return false;
      throw new Error(`try: no alternative evaluates: ${node.meta.value}`);
    }
    let args = await Promise.all(node.children.map((_, i) => arg(i)));
    if (node.meta.expandedFinalArgument) args = [...args.slice(0, -1), ...list(args.at(-1)!)];
    if (name === "templatefile") return this.templatefile(text(args[0]!), obj(args[1]!));
    const fn = FUNCTIONS[name];
    if (!fn) throw new Error(`unsupported function ${name}()`);
    return args.some(hasUnknown) ? new Unknown(node.meta.value) : fn(...args);
  }

  /** Renders a template file; values known only after apply appear as readable placeholders. */
  private async templatefile(path: string, vars: { [key: string]: Value }): Promise<string> {
    const scope = new Map(Object.entries(vars));
    let out = "";
    for (const part of templateParts(this.module.read(resolve(this.module.dir, path)))) {
      if ("literal" in part) out += part.literal;
      else if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(part.expression) || !scope.has(part.expression))
        throw new Error(`${path}: \${${part.expression}} is not one of the template's variables`);
      else out += text(scope.get(part.expression)!);
    }
    return out;
  }

  private async forExpression(meta: Syntax.ForExpressionMeta, scope: Scope): Promise<Value> {
    const collection = await this.expression(meta.collectionExpression, scope);
    if (collection instanceof Unknown) return collection;
    const entries: [Value, Value][] = Array.isArray(collection)
      ? collection.map((v, i) => [i, v])
      : Object.keys(obj(collection))
          .sort()
          .map((k) => [k, obj(collection)[k]!]);
    const isObjectResult = Boolean(meta.keyExpression);
    const out: { [key: string]: Value } = {};
    const items: Value[] = [];
    for (const [k, v] of entries) {
      const inner = new Map(scope);
      if (meta.keyVar) inner.set(meta.keyVar, k);
      inner.set(meta.valVar, v);
      if (meta.conditionalExpression && (await this.expression(meta.conditionalExpression, inner)) !== true) continue;
      const value = await this.expression(meta.valueExpression, inner);
      if (!isObjectResult) {
        items.push(value);
        continue;
      }
      const key = text(await this.expression(meta.keyExpression, inner));
      if (meta.groupedValue) ((out[key] ??= []) as Value[]).push(value);
      else if (key in out) throw new Error(`duplicate key ${key} in for expression (use ... to group)`);
      else out[key] = value;
    }
    return isObjectResult ? out : items;
  }

  private async traverse(parts: Syntax.TerraformTraversalPart[], scope: Scope): Promise<Value> {
    const [root, ...rest] = parts.map((p) => p.segment);
    const name = rest[0] ?? "";
    if (scope.has(root!)) return this.steps(scope.get(root!)!, parts.slice(1), root!);
    switch (root) {
      case "var":
        return this.steps(await this.variable(name), parts.slice(2), `var.${name}`);
      case "local":
        return this.steps(await this.local(name), parts.slice(2), `local.${name}`);
      case "path":
        if (name === "module") return this.module.dir;
        throw new Error(`path.${name} is not supported offline`);
      case "module": {
        const child = await this.child(name);
        return this.steps(await child.output(rest[1] ?? ""), parts.slice(3), `module.${name}.${rest[1]}`);
      }
    }
    const reference = parts.map((p) => (p.type === "indexTraversal" ? `[${p.segment}]` : p.segment)).join(".");
    if (this.options.allowUnknown) return new Unknown(reference.replace(/\.\[/g, "["));
    throw new Error(`${reference} is known only after apply`);
  }

  private steps(value: Value, parts: Syntax.TerraformTraversalPart[], path: string): Value {
    for (const part of parts) {
      const index = part.type === "indexTraversal";
      value = this.step(value, index ? JSON.parse(part.segment) : part.segment, path, index);
      path += index ? `[${part.segment}]` : `.${part.segment}`;
    }
    return value;
  }

  private step(value: Value, key: Value, path: string, index: boolean): Value {
    if (value instanceof Unknown || key instanceof Unknown) {
      const base = value instanceof Unknown ? value.reference : path;
      return new Unknown(index ? `${base}[${JSON.stringify(key)}]` : `${base}.${String(key)}`);
    }
    if (Array.isArray(value)) {
      const item = value[num(key)];
      if (item === undefined) throw new Error(`${path}: no element ${String(key)}`);
      return item;
    }
    const map = obj(value);
    if (!(text(key) in map)) throw new Error(`${path} has no attribute ${JSON.stringify(key)}`);
    return map[text(key)]!;
  }
}
