import { performance } from "node:perf_hooks";
import { lintSource } from "@secretlint/core";
import { secretLintProfiler } from "@secretlint/profiler";
import { creator as recommended } from "@secretlint/secretlint-rule-preset-recommend";

export interface Redaction {
  /** Character offsets into the text, end exclusive. */
  start: number;
  end: number;
  /** Which rule found it: a secretlint rule id, or "high-entropy". */
  rule: string;
}

/** What replaces a secret in the text that leaves the device: same line count, nothing of the secret. */
export const REDACTED = "[secret removed]";

// Tokens that look random: long runs of base64/hex-ish characters.
const TOKEN = /[A-Za-z0-9+/_\-=]{24,}/g;
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
 * Random-looking tokens that secretlint's provider-specific rules would miss (a generic API key in
 * a config, a token pasted into a test). Identifiers and paths are spared: they are words, not noise.
 */
/** Words joined by separators (`Ai_Cf_Meta_Llama_3`, `docs/Web/API/port1`): a name, not a secret. */
function wordLike(token: string): boolean {
  const parts = token.split(/[_\-/.+=]+/).filter(Boolean);
  if (parts.length < 3) return false;
  const words = parts.filter((p) => /^([A-Z]?[a-z]+|[A-Z]+|\d+[A-Za-z]?|[A-Z][a-z]*\d*)$/.test(p)).length;
  return words / parts.length >= 0.6;
}

/** Runs like `0123456789ABCDEF…`: an alphabet written out, not noise. */
function sequential(token: string): boolean {
  let steps = 0;
  for (let i = 1; i < token.length; i++) if (token.charCodeAt(i) === token.charCodeAt(i - 1) + 1) steps++;
  return steps / token.length > 0.5;
}

function highEntropy(text: string): Redaction[] {
  const found: Redaction[] = [];
  for (const match of text.matchAll(TOKEN)) {
    const token = match[0];
    const classes = [/[a-z]/, /[A-Z]/, /[0-9]/].filter((re) => re.test(token)).length;
    if (classes < 3 || entropy(token) < MIN_ENTROPY_BITS || wordLike(token) || sequential(token)) continue;
    found.push({ start: match.index!, end: match.index! + token.length, rule: "high-entropy" });
  }
  return found;
}

/**
 * Finds secrets in a file with secretlint's recommended rules (cloud keys, tokens, private keys,
 * connection strings…) plus a high-entropy check, before anything leaves the device.
 */
export async function findSecrets(path: string, text: string): Promise<Redaction[]> {
  const ext = extensionOf(path);
  const result = await lintSource({
    source: { filePath: `file${ext}`, content: text, ext, contentType: "text" },
    options: {
      config: { rules: [{ id: "@secretlint/secretlint-rule-preset-recommend", rule: recommended }] },
      noPhysicFilePath: true,
    },
  });
  await forgetProfile();
  const found = result.messages.map((m) => ({ start: m.range[0], end: m.range[1], rule: m.ruleId }));
  return merge([...found, ...highEntropy(text)]);
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
