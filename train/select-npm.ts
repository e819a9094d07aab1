import { z } from "zod";
import { isExcludedFromTraining } from "./exclusions.js";
import type { NpmEntry } from "./package-list.js";

/**
 * Well-known, well-documented libraries across domains; the breadth-first walk over their
 * dependencies fills the rest of the list. Cloud SDK clients are few on purpose: generated
 * clients document thousands of near-identical methods.
 */
export const NPM_SEEDS = [
  // Web frameworks and HTTP.
  ...["express", "koa", "fastify", "hono", "@hapi/hapi", "restify", "connect", "body-parser", "cors", "helmet"],
  ...["axios", "got", "ky", "node-fetch", "undici", "superagent", "cookie", "http-proxy", "ws", "socket.io"],
  ...["graphql", "@apollo/server", "graphql-tools", "trpc", "@trpc/server", "jsonwebtoken", "passport", "jose"],
  // CLI.
  ...["commander", "yargs", "inquirer", "@inquirer/prompts", "chalk", "ora", "cli-progress", "meow", "cac"],
  ...["execa", "shelljs", "listr2", "enquirer", "prompts", "boxen", "cosmiconfig", "dotenv", "minimist"],
  // Data structures, functional utilities, dates and numbers.
  ...["immutable", "immer", "mnemonist", "bignumber.js", "decimal.js", "big.js", "mathjs", "dayjs", "luxon"],
  ...["moment", "ms", "uuid", "nanoid", "fp-ts", "effect", "just-diff", "deepmerge", "fast-deep-equal"],
  ...["yallist", "lru-cache", "p-queue", "p-limit", "eventemitter3", "mitt", "collections", "bluebird"],
  // Validation and parsing.
  ...["zod", "yup", "joi", "ajv", "superstruct", "valibot", "io-ts", "class-validator", "validator"],
  ...["acorn", "@babel/parser", "esprima", "espree", "postcss", "marked", "markdown-it", "remark", "unified"],
  ...["htmlparser2", "cheerio", "parse5", "yaml", "js-yaml", "toml", "csv-parse", "papaparse", "xml2js"],
  ...["fast-xml-parser", "chevrotain", "nearley", "peggy", "jsonc-parser", "semver", "qs", "query-string"],
  // Testing.
  ...["vitest", "jest", "mocha", "chai", "sinon", "ava", "tap", "@testing-library/dom", "nock", "supertest"],
  ...["fast-check", "expect", "jasmine", "playwright", "puppeteer", "cypress", "msw", "testdouble"],
  // Build tools and code tooling.
  ...["webpack", "rollup", "vite", "esbuild", "@babel/core", "typescript", "eslint", "prettier", "terser"],
  ...["browserslist", "autoprefixer", "tsup", "@swc/core", "parcel", "gulp", "grunt", "chokidar", "glob"],
  ...["micromatch", "fast-glob", "minimatch", "fs-extra", "rimraf", "del", "globby", "tar", "archiver"],
  // Cloud and database clients, in moderation.
  ...["@aws-sdk/client-s3", "@google-cloud/storage", "@azure/storage-blob", "pg", "mysql2", "mongodb"],
  ...["ioredis", "redis", "sequelize", "typeorm", "knex", "drizzle-orm", "prisma", "mongoose", "better-sqlite3"],
  // UI libraries.
  ...["react", "react-dom", "vue", "preact", "svelte", "solid-js", "lit", "@angular/core", "jquery", "d3"],
  ...["three", "chart.js", "echarts", "leaflet", "react-router", "redux", "@reduxjs/toolkit", "mobx", "zustand"],
  ...["@tanstack/react-query", "formik", "react-hook-form", "styled-components", "@emotion/react", "classnames"],
  ...["framer-motion", "quill", "codemirror", "@codemirror/state", "monaco-editor", "highlight.js", "prismjs"],
  // Node utilities.
  ...["debug", "winston", "pino", "bunyan", "yargs-parser", "mime", "mime-types", "iconv-lite", "sharp"],
  ...["jimp", "pdfkit", "nodemailer", "node-cron", "cron", "bull", "bullmq", "agenda", "ioredis-mock"],
  ...["handlebars", "ejs", "pug", "mustache", "nunjucks", "dompurify", "sanitize-html", "he", "entities"],
  ...["crypto-js", "bcryptjs", "jszip", "pako", "fflate", "form-data", "busboy", "multer", "sax", "source-map"],
  // More of the same domains, and media, graphics, messaging, search and i18n.
  ...["@tanstack/query-core", "@tanstack/table-core", "xstate", "socket.io-client", "dexie", "localforage", "idb"],
  ...["yjs", "@sinclair/typebox", "class-transformer", "inversify", "tsyringe", "@nestjs/common", "@nestjs/core"],
  ...["next", "astro", "backbone", "knockout", "alpinejs", "mithril", "@vue/reactivity", "pinia", "vuex"],
  ...["change-case", "pluralize", "slugify", "numeral", "currency.js", "dinero.js", "chroma-js", "color"],
  ...["tinycolor2", "gl-matrix", "matter-js", "pixi.js", "konva", "fabric", "paper", "tone", "howler", "hls.js"],
  ...["video.js", "swiper", "sortablejs", "interactjs", "@popperjs/core", "tippy.js", "@floating-ui/dom"],
  ...["pdfjs-dist", "pdf-lib", "exceljs", "docx", "mammoth", "turndown", "showdown", "linkifyjs", "node-forge"],
  ...["tweetnacl", "elliptic", "bn.js", "ethers", "viem", "protobufjs", "@grpc/grpc-js", "msgpackr", "cbor"],
  ...["bson", "kafkajs", "amqplib", "mqtt", "ssh2", "basic-ftp", "@octokit/rest", "simple-git", "isomorphic-git"],
  ...["dockerode", "@kubernetes/client-node", "pm2", "nodemon", "concurrently", "jsdom", "happy-dom", "fuse.js"],
  ...["lunr", "flexsearch", "minisearch", "natural", "compromise", "i18next", "intl-messageformat", "rrule"],
  ...["cron-parser", "chrono-node", "jsonpath-plus", "json5", "ini", "fast-json-stringify", "superjson"],
  ...["devalue", "acorn-walk", "estraverse", "recast", "jscodeshift", "ts-morph", "magic-string", "esquery"],
  ...["@typescript-eslint/parser", "stylelint", "sass", "less", "tailwindcss", "postcss-selector-parser", "csso"],
  ...["clean-css", "html-minifier-terser", "svgo", "comlink", "piscina", "workerpool", "async-mutex", "p-retry"],
  ...["bottleneck", "rate-limiter-flexible", "opossum", "cockatiel", "neverthrow", "purify-ts", "runtypes"],
  ...["arktype", "ow", "node-html-parser", "jmespath", "js-base64", "buffer", "events", "path-to-regexp"],
] as const;

const Version = z.object({
  name: z.string(),
  version: z.string(),
  deprecated: z.unknown().optional(),
  dependencies: z.record(z.string(), z.string()).optional(),
  peerDependencies: z.record(z.string(), z.string()).optional(),
  dist: z.object({ tarball: z.url(), integrity: z.string() }),
});
const Packument = z.object({ versions: z.record(z.string(), z.unknown()) });

export interface NpmSelectOptions {
  registry: string;
  target: number;
  /** The largest compressed tarball taken: beyond it a package is mostly data, builds or binaries. */
  maxTarballBytes: number;
  concurrency: number;
  log: (line: string) => void;
}

const isRelease = (version: string) => /^\d+\.\d+\.\d+$/.test(version);
const compareVersions = (a: string, b: string) => {
  const [x, y] = [a, b].map((v) => v.split(".").map(Number));
  return x![0]! - y![0]! || x![1]! - y![1]! || x![2]! - y![2]!;
};

async function getJson(url: string): Promise<unknown | undefined> {
  const response = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  if (response.status === 404) return undefined;
  if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
  return response.json();
}

/** The latest release (no prerelease tag) of a package, or undefined when it has none or is gone. */
async function latestRelease(registry: string, name: string): Promise<z.infer<typeof Version> | undefined> {
  const base = `${registry}${name.replace("/", "%2f")}`;
  const latest = await getJson(`${base}/latest`);
  if (latest === undefined) return undefined;
  const doc = Version.parse(latest);
  if (isRelease(doc.version)) return doc;
  const all = await getJson(base);
  const versions = Object.keys(Packument.parse(all).versions).filter(isRelease).sort(compareVersions);
  const newest = versions.at(-1);
  return newest ? Version.parse(await getJson(`${base}/${newest}`)) : undefined;
}

async function tarballBytes(url: string): Promise<number> {
  const response = await fetch(url, { method: "HEAD", signal: AbortSignal.timeout(60_000) });
  return Number(response.headers.get("content-length") ?? Infinity);
}

/**
 * Breadth first from the seeds over `dependencies` and `peerDependencies`, one level at a time
 * (each level in the order its names were found), until `target` packages are taken. Excluded,
 * deprecated, oversized and prerelease-only packages are passed over, and their dependencies not
 * followed.
 */
export async function selectNpm(options: NpmSelectOptions): Promise<NpmEntry[]> {
  const taken: NpmEntry[] = [];
  const seen = new Set<string>();
  let level: string[] = NPM_SEEDS.filter((n) => !seen.has(n) && seen.add(n));
  for (let depth = 0; level.length > 0 && taken.length < options.target; depth++) {
    const docs: (z.infer<typeof Version> | undefined)[] = new Array(level.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < level.length; i = next++) {
        const name = level[i]!;
        try {
          if (isExcludedFromTraining(name)) continue;
          const doc = await latestRelease(options.registry, name);
          if (!doc || doc.deprecated) continue;
          if ((await tarballBytes(doc.dist.tarball)) > options.maxTarballBytes) continue;
          docs[i] = doc;
        } catch (err) {
          options.log(`npm ${name}: ${err instanceof Error ? err.message : err}`);
        }
      }
    };
    await Promise.all(Array.from({ length: options.concurrency }, worker));
    const found: string[] = [];
    for (const doc of docs) {
      // A release without a sha512 integrity (only old ones) cannot be pinned the way fetch checks it.
      if (!doc?.dist.integrity.startsWith("sha512-") || taken.length >= options.target) continue;
      taken.push({ name: doc.name, version: doc.version, integrity: doc.dist.integrity });
      for (const [dep, spec] of Object.entries({ ...doc.dependencies, ...doc.peerDependencies })) {
        const real = spec.startsWith("npm:") ? spec.slice(4).replace(/(.)@[^@]*$/, "$1") : dep;
        if (!seen.has(real)) (found.push(real), seen.add(real));
      }
    }
    options.log(`npm level ${depth}: ${taken.length} packages taken, ${found.length} names to look at next`);
    level = found;
  }
  return taken;
}
