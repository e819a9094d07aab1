/**
 * `npx tsx train/select.ts`: writes `train/packages.json`, the pinned list the training data is
 * mined from. Run once and committed: a later run sees newer releases and may pick other packages,
 * while the pipeline (`npm run train:data`) only ever reads the committed file.
 *
 *   npx tsx train/select.ts [--npm 3000] [--per-language 400] [--out train/packages.json]
 */
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { format } from "prettier";
import { isExcludedFromTraining } from "./exclusions.js";
import { PACKAGES_JSON, PackageList } from "./package-list.js";
import { selectDebian } from "./select-debian.js";
import { selectNpm } from "./select-npm.js";

const { values: args } = parseArgs({
  options: {
    npm: { type: "string", default: "3000" },
    "per-language": { type: "string", default: "400" },
    out: { type: "string", default: fileURLToPath(PACKAGES_JSON) },
  },
});

const log = (line: string) => process.stderr.write(`${line}\n`);
const configured = process.env.npm_config_registry || "https://registry.npmjs.org/";
const registry = configured.endsWith("/") ? configured : `${configured}/`;

const npm = await selectNpm({
  registry,
  target: Number(args.npm),
  maxTarballBytes: 5 * 1024 * 1024,
  concurrency: 16,
  log,
});
const debian = await selectDebian(Number(args["per-language"]));
const list = PackageList.parse({
  npm: npm.sort((a, b) => a.name.localeCompare(b.name)),
  debian: debian.sort((a, b) => a.language.localeCompare(b.language) || a.name.localeCompare(b.name)),
});
const leaked = [...list.npm, ...list.debian].find((p) => isExcludedFromTraining(p.name));
if (leaked) throw new Error(`${leaked.name} is excluded from training and must not be pinned`);
// Formatted as the repository formats JSON, so that `prettier --check` passes on the committed file.
writeFileSync(resolve(args.out), await format(JSON.stringify(list), { parser: "json" }));
const counts = ["python", "go", "rust"].map((l) => `${list.debian.filter((p) => p.language === l).length} ${l}`);
log(`wrote ${args.out}: ${list.npm.length} npm packages, Debian ${counts.join(", ")}`);
