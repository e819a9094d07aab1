#!/usr/bin/env node
// Runs the bundled CLI (`npm run build:cli`, which `npm install` and `npm ci` run as `prepare`):
// compiling the TypeScript through tsx on every start cost over a second of CPU.
import { existsSync, readFileSync, statSync } from "node:fs";

const root = new URL("../../", import.meta.url);
const built = new URL("client/dist/sextant.js", root);
const source = new URL("client/cli/entry.ts", root);

/**
 * In a checkout the bundle can be older than the source (an edit, a pull, a branch switch), and
 * the tests spawn this bin: an input newer than the bundle means the bundle would run old code.
 * An installed package ships the bundle without the source.
 */
function bundleIsCurrent() {
  if (!existsSync(built)) return false;
  if (!existsSync(source)) return true;
  try {
    const builtAt = statSync(built).mtimeMs;
    const inputs = JSON.parse(readFileSync(new URL("client/dist/inputs.json", root), "utf8"));
    return inputs.every((path) => statSync(new URL(path, root)).mtimeMs <= builtAt);
  } catch {
    return false;
  }
}

if (bundleIsCurrent()) {
  await import(built.href);
} else {
  // With --json, stderr carries the error as JSON for a machine to parse: no notice there.
  if (!process.argv.includes("--json"))
    process.stderr.write(
      "sextant: client/dist is missing or older than the source; running the source through tsx (`npm run build:cli` builds it)\n",
    );
  const { register } = await import("tsx/esm/api");
  register();
  await import(source.href);
}
