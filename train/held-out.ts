import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Parser, type ReadEntry } from "tar";
import { z } from "zod";
import { matchesIntegrity } from "../eval/fetch.js";
import { DOC_STYLES } from "../eval/doc-styles.js";
import { languageOf } from "../client/index/languages.js";
import { FINGERPRINT_DEBIAN, FINGERPRINT_NPM } from "./exclusions.js";
import { extractFile } from "./extract.js";
import { addFingerprints, emptyFingerprints, type Fingerprints } from "./fingerprint.js";
import { parseStanzas } from "./select-debian.js";

const run = promisify(execFile);

/** Held-out builds and bundles count too (a vendored copy is usually one), up to this size a file. */
const MAX_FILE_BYTES = 4 * 1024 * 1024;

export interface HeldOutSource {
  label: string;
  files: number;
}

/**
 * The source files in a tar stream, read in memory: held-out text is never written to disk, only
 * hashed. Every file in a language with a doc style counts, builds and type declarations included.
 */
async function sourcesInTar(feed: (parser: Parser) => void, onFile: (path: string, text: string) => Promise<void>) {
  const files: { path: string; text: string }[] = [];
  await new Promise<void>((resolve, reject) => {
    const parser = new Parser({
      onReadEntry: (entry: ReadEntry) => {
        const language = languageOf(entry.path);
        if (entry.type !== "File" || !language || !DOC_STYLES[language] || entry.size > MAX_FILE_BYTES) {
          entry.resume();
          return;
        }
        const chunks: Buffer[] = [];
        entry.on("data", (chunk: Buffer) => chunks.push(chunk));
        entry.on("end", () => files.push({ path: entry.path, text: Buffer.concat(chunks).toString("utf8") }));
      },
    });
    parser.on("end", () => resolve());
    parser.on("error", reject);
    feed(parser);
  });
  for (const file of files) await onFile(file.path, file.text);
  return files.length;
}

const VersionDocument = z.object({ version: z.string(), dist: z.object({ tarball: z.url(), integrity: z.string() }) });

async function npmSource(registry: string, name: string, into: Fingerprints): Promise<HeldOutSource> {
  const docResponse = await fetch(`${registry}${name.replace("/", "%2f")}/latest`, {
    signal: AbortSignal.timeout(60_000),
  });
  if (!docResponse.ok) throw new Error(`${name}: ${docResponse.status}`);
  const doc = VersionDocument.parse(await docResponse.json());
  const response = await fetch(doc.dist.tarball, { signal: AbortSignal.timeout(120_000) });
  const bytes = Buffer.from(await response.arrayBuffer());
  if (!matchesIntegrity(bytes, doc.dist.integrity)) throw new Error(`${name}@${doc.version}: integrity mismatch`);
  const files = await sourcesInTar(
    (parser) => parser.end(bytes),
    async (path, text) => {
      const file = await extractFile(path, text);
      if (file) addFingerprints(into, file);
    },
  );
  return { label: `${name}@${doc.version}`, files };
}

/** apt's candidate .deb, downloaded to a scratch folder that is removed as soon as it has been read. */
async function debianSource(name: string, into: Fingerprints): Promise<HeldOutSource> {
  const { stdout } = await run("apt-cache", ["show", name]);
  const stanza = parseStanzas(stdout).find((s) => ["all", "amd64"].includes(s.Architecture ?? ""));
  if (!stanza?.Version || !stanza.SHA256) throw new Error(`${name}: apt has no amd64 or all version`);
  const scratch = mkdtempSync(join(tmpdir(), "sextant-held-out-"));
  try {
    await run("apt-get", ["download", `${name}=${stanza.Version}`], { cwd: scratch, timeout: 300_000 });
    const deb = join(scratch, readdirSync(scratch).find((f) => f.endsWith(".deb"))!);
    const sha256 = createHash("sha256").update(readFileSync(deb)).digest("hex");
    if (sha256 !== stanza.SHA256) throw new Error(`${name}=${stanza.Version}: SHA-256 mismatch`);
    const files = await sourcesInTar(
      (parser) => {
        const dpkg = spawn("dpkg-deb", ["--fsys-tarfile", deb], { stdio: ["ignore", "pipe", "inherit"] });
        dpkg.stdout.pipe(parser);
      },
      async (path, text) => {
        const file = await extractFile(path, text);
        if (file) addFingerprints(into, file);
      },
    );
    return { label: `${name}@${stanza.Version}`, files };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Fingerprints of every reachable held-out package (HELD-OUT.md's and the dev eval's), from their
 * newest versions here. A package that cannot be fetched is reported, not fatal: the name filter
 * still keeps it out.
 */
export async function heldOutFingerprints(
  registry: string,
  log: (line: string) => void,
): Promise<{ fingerprints: Fingerprints; sources: HeldOutSource[]; failed: string[] }> {
  const fingerprints = emptyFingerprints();
  const sources: HeldOutSource[] = [];
  const failed: string[] = [];
  const jobs = [
    ...FINGERPRINT_NPM.map((name) => () => npmSource(registry, name, fingerprints)),
    ...FINGERPRINT_DEBIAN.map((name) => () => debianSource(name, fingerprints)),
  ];
  for (const [i, job] of jobs.entries()) {
    const name = [...FINGERPRINT_NPM, ...FINGERPRINT_DEBIAN][i]!;
    try {
      const source = await job();
      sources.push(source);
      log(`held out ${source.label}: ${source.files} files fingerprinted`);
    } catch (err) {
      failed.push(name);
      log(`held out ${name}: not fingerprinted (${err instanceof Error ? err.message : err})`);
    }
  }
  return { fingerprints, sources, failed };
}
