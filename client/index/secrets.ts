import { performance } from "node:perf_hooks";
import { lintSource } from "@secretlint/core";
import { secretLintProfiler } from "@secretlint/profiler";
import { creator as recommended } from "@secretlint/secretlint-rule-preset-recommend";

export interface Redaction {
  /** Character offsets into the text, end exclusive. */
  start: number;
  end: number;
  /** Which rule found it: a secretlint rule id, or "named-credential". */
  rule: string;
}

/** What replaces a secret in the text that leaves the device: same line count, nothing of the secret. */
export const REDACTED = "[secret removed]";

/**
 * A random-looking value assigned to a name that says it is a credential (`API_TOKEN = "…"`,
 * `clientSecret: '…'`, `AUTH_TOKEN=…` in a .env file): the generic key that no provider rule of the
 * preset knows. The name is required because a random-looking token alone is not a secret: over the
 * 7,964 files of `npm run eval:secrets` a bare entropy check redacted 1,502 identifiers
 * (`JsonSchema7NativeEnumType`) and base64 test strings, and those chunks could no longer be found.
 */
const CREDENTIAL_NAME = String.raw`[\w$]*(?:secret|token|passw(?:or)?d|api_?key|apikey|access_?key|private_?key|credential|auth)[\w$]*`;
const CREDENTIAL_VALUE = String.raw`(?<value>[A-Za-z0-9+/_\-=.]{20,})`;
const NAMED_CREDENTIALS = [
  // In code and JSON: a quoted value.
  new RegExp(String.raw`\b${CREDENTIAL_NAME}["']?\s*(?:=|:|:=|=>)\s*(["'\`])${CREDENTIAL_VALUE}\1`, "gid"),
  // In .env, ini and YAML files: the rest of a `NAME=value` or `name: value` line, unquoted.
  new RegExp(
    String.raw`^[ \t]*(?:export[ \t]+)?${CREDENTIAL_NAME}[ \t]*[=:][ \t]*${CREDENTIAL_VALUE}[ \t]*\r?$`,
    "gimd",
  ),
];
const MIN_ENTROPY_BITS = 4.2;

function entropy(token: string): number {
  const counts = new Map<string, number>();
  for (const ch of token) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) {
    const p = n / token.length;
    bits -= p * Math.log2(p);
  }
  return bits;
}

/**
 * A name, not noise: `Ai_Cf_Meta_Llama_3`, `docs/Web/API/port1`, `JsonSchema7NativeEnumType`. Split on
 * separators and camel-case humps, most parts are words (a capital and lower case letters, all
 * capitals, or a short number), where a key's parts are short jumbles of case and digits.
 */
function wordLike(token: string): boolean {
  const parts = token.split(/[_\-/.+=]+|(?<=[a-z0-9])(?=[A-Z])/).filter(Boolean);
  if (parts.length < 2) return false;
  const words = parts.filter((p) => /^([A-Z]?[a-z]{2,}\d{0,2}|[A-Z]{2,}\d{0,2}|\d{1,4}[A-Za-z]?)$/.test(p)).length;
  return words / parts.length >= 0.6;
}

/** Runs like `0123456789ABCDEF…`: an alphabet written out, not noise. */
function sequential(token: string): boolean {
  let steps = 0;
  for (let i = 1; i < token.length; i++) if (token.charCodeAt(i) === token.charCodeAt(i - 1) + 1) steps++;
  return steps / token.length > 0.5;
}

function namedCredentials(text: string): Redaction[] {
  const found: Redaction[] = [];
  for (const match of NAMED_CREDENTIALS.flatMap((re) => [...text.matchAll(re)])) {
    const token = match.groups!.value!;
    const classes = [/[a-z]/, /[A-Z]/, /[0-9]/].filter((re) => re.test(token)).length;
    if (classes < 3 || entropy(token) < MIN_ENTROPY_BITS || wordLike(token) || sequential(token)) continue;
    // The value's own range: the name and the quotes stay, so the code around it reads the same.
    const [start, end] = match.indices!.groups!.value!;
    found.push({ start, end, rule: NAMED_CREDENTIAL_RULE });
  }
  return found;
}

/** The rule id of the one check that is not secretlint's preset. */
export const NAMED_CREDENTIAL_RULE = "named-credential";

/**
 * Finds secrets in a file with secretlint's recommended rules (cloud keys, tokens, private keys,
 * connection strings…) plus a random-looking value under a credential's name, before anything leaves
 * the device.
 */
export async function findSecrets(path: string, text: string): Promise<Redaction[]> {
  const ext = extensionOf(path);
  const result = await lintSource({
    source: { filePath: nameForRules(path, ext), content: text, ext, contentType: "text" },
    options: {
      config: { rules: [{ id: "@secretlint/secretlint-rule-preset-recommend", rule: recommended }] },
      noPhysicFilePath: true,
    },
  });
  await forgetProfile();
  const found = result.messages.map((m) => {
    const { start, end } = coveringReported(text, m.range, m.data);
    return { ...withinQuotes(text, start, end), rule: m.ruleId };
  });
  return merge([...found, ...namedCredentials(text)]);
}

/**
 * The preset's npm rule looks for GitHub OAuth tokens in URLs only in a file whose name ends with
 * `package.json` or `package-lock.json`, so those two names are passed on as they are.
 */
function nameForRules(path: string, ext: string): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  return name === "package.json" || name === "package-lock.json" ? name : `file${ext}`;
}

/**
 * The extension is all secretlint's rules look at in a name. The real name never reaches it:
 * secretlint builds performance-mark names from the file path, and a name with a newline (legal on
 * Linux) makes its profiler throw, so only a plain extension is passed on.
 */
function extensionOf(path: string): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  const dot = name.lastIndexOf(".");
  const ext = dot >= 0 ? name.slice(dot) : "";
  return /^\.[A-Za-z0-9_+-]{1,16}$/.test(ext) ? ext : "";
}

/**
 * secretlint records a performance mark for every rule on every file in a process-wide profiler and
 * searches that list on each new mark: over a whole workspace that is quadratic time and unbounded
 * memory (Node's performance timeline keeps every mark too). Nothing here reads the profile, so it
 * is emptied after every file.
 */
async function forgetProfile(): Promise<void> {
  // Let the profiler's observer see this file's marks and finish its measures before clearing them.
  await new Promise((resolve) => setImmediate(resolve));
  (await secretLintProfiler.getEntries()).length = 0;
  (await secretLintProfiler.getMeasures()).length = 0;
  performance.clearMarks();
  performance.clearMeasures();
}

/**
 * The range a rule reports may not hold the secret it names: the AWS secret-key rule reports the
 * secret's length from where the variable's name starts, so `AWS_SECRET_ACCESS_KEY=…` is reported
 * with the key's tail outside the range. The secret is in the message's data too: the range is
 * widened to cover where that value next occurs.
 */
function coveringReported(
  text: string,
  range: readonly [number, number],
  data: unknown,
): { start: number; end: number } {
  const start = range[0];
  let end = range[1];
  const values = data && typeof data === "object" ? Object.values(data) : [];
  for (const value of values) {
    if (typeof value !== "string" || value.length < 8) continue;
    const at = text.indexOf(value, start);
    if (at >= 0 && at <= end) end = Math.max(end, at + value.length);
  }
  return { start, end };
}

/**
 * The preset's connection-string patterns run to the next whitespace, so `"postgres://u:p@h/db"; }`
 * matches up to the brace and redacting that range ate the closing quote and the code after it. A
 * match that opens a string literal ends where that literal does: its quote cannot be part of it.
 * Unless an `@` follows the quote: then the credentials themselves run on past it (`"…u:" + pw + "@h"`),
 * and the whole match is kept so that none of them leaves.
 */
function withinQuotes(text: string, start: number, end: number): { start: number; end: number } {
  const quote = text[start - 1];
  if (quote !== '"' && quote !== "'" && quote !== "`") return { start, end };
  for (let i = start; i < end; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === quote) return text.slice(i, end).includes("@") ? { start, end } : { start, end: i };
  }
  return { start, end };
}

function merge(ranges: Redaction[]): Redaction[] {
  const sorted = [...ranges].sort((a, b) => a.start - b.start);
  const out: Redaction[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r.start <= last.end) last.end = Math.max(last.end, r.end);
    else out.push({ ...r });
  }
  return out;
}

/** The text with every secret replaced; newlines inside a secret (a PEM block) are kept. */
export function redact(text: string, secrets: readonly Redaction[]): string {
  let out = "";
  let at = 0;
  for (const s of secrets) {
    const lines = text.slice(s.start, s.end).split("\n").length - 1;
    out += text.slice(at, s.start) + REDACTED + "\n".repeat(lines);
    at = s.end;
  }
  return out + text.slice(at);
}
