#!/usr/bin/env node
// Runs the bundled CLI (`npm run build:cli`, which `npm install`, `npm ci` and packing the
// `sextant-cli` package run): compiling the TypeScript through tsx on every start cost over a second
// of CPU. The same file is the bin of the checkout and of the installed package, so paths are taken
// from the package's own directory (client/ in the checkout).
import { existsSync, readFileSync, statSync } from "node:fs";

const pkg = new URL("../", import.meta.url);
const built = new URL("dist/sextant.js", pkg);
const source = new URL("cli/entry.ts", pkg);

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
    // The paths are the checkout's, from its root.
    const root = new URL("../", pkg);
    const inputs = JSON.parse(readFileSync(new URL("dist/inputs.json", pkg), "utf8"));
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
