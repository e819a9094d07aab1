/**
 * Environment sessions in tests: a small Harbor task (its archive built as the client builds it:
 * sorted entries, mtime 0, gzip'd), pushed to a local edge as a one-task set, and the requests a
 * session's client makes.
 */
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { packTar, type TarEntry } from "modern-tar";
import { expect } from "vitest";
import { rawCall, type AgentStack } from "./agent-stack.js";
import { savedLocalEdge } from "./local-edge.js";

/** Text only the task holds: none of it may reach the edge's storage or its log. */
export const MARK = crypto.randomUUID().replace(/-/g, "");
export const INSTRUCTION = `Set value.txt to the answer, 42 (instruction ${MARK}).`;
export const NOTES = `Notes the agent may read: quartz-lantern-${MARK}`;

const encode = (text: string) => new TextEncoder().encode(text);

/** The task's files: the tree starts as `environment/`; the tests score value.txt and the step log. */
export function taskFiles(): Map<string, Uint8Array> {
  return new Map([
    ["instruction.md", encode(`${INSTRUCTION}\n`)],
    ["task.toml", encode("[verifier]\ntimeout_sec = 30\n\n[agent]\ntimeout_sec = 900\n")],
    ["environment/value.txt", encode("0\n")],
    ["environment/notes.txt", encode(`${NOTES}\n`)],
    [
      "tests/test.sh",
      encode(
        [
          "#!/bin/bash",
          "# 1 when value.txt says 42, or when steps.log holds each step once, in order.",
          'if [ "$(cat value.txt)" = "42" ]; then echo 1 > /logs/verifier/reward.txt; exit 0; fi',
          'if [ -f steps.log ] && [ "$(cat steps.log)" = "$(seq 1 "$(wc -l < steps.log)")" ] && [ "$(wc -l < steps.log)" -ge 2 ]; then',
          "  echo 1 > /logs/verifier/reward.txt",
          "else",
          "  echo 0 > /logs/verifier/reward.txt",
          "fi",
          "cat steps.log 2>/dev/null",
          "",
        ].join("\n"),
      ),
    ],
  ]);
}

/** A task archive as the client makes it: sorted entries, mtime 0, gzip'd; and its SHA-256. */
export async function taskArchive(files = taskFiles()): Promise<{ archive: Uint8Array; sha256: string }> {
  const entries: TarEntry[] = [...files.keys()].sort().map((name) => ({
    header: { name, size: files.get(name)!.byteLength, mtime: new Date(0), mode: 0o644 },
    body: files.get(name)!,
  }));
  const archive = new Uint8Array(gzipSync(await packTar(entries)));
  return { archive, sha256: createHash("sha256").update(archive).digest("hex") };
}

export interface EnvClient {
  key: string;
  call(method: string, path: string, body?: unknown): Promise<{ status: number; type: string; json: any }>;
}

export const envClient = (stack: AgentStack, key = savedLocalEdge(stack.edge).apiKey): EnvClient => ({
  key,
  call: (method, path, body) => rawCall(stack.edge, key, method, path, body),
});

/** Uploads the archive and makes a one-task set of it; the set's id. */
export async function pushTaskSet(stack: AgentStack, client: EnvClient): Promise<{ id: string; sha256: string }> {
  const { archive, sha256 } = await taskArchive();
  const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/gzip" },
    body: archive as Uint8Array<ArrayBuffer>,
  });
  expect(put.status, await put.clone().text()).toBe(201);
  expect(await put.json()).toEqual({ sha256, bytes: archive.byteLength });
  const set = await client.call("POST", "/v1/envs/tasksets", {
    tasks: [{ sha256, bytes: archive.byteLength, settings: { verifierTimeoutSec: 30 } }],
  });
  expect(set.status, JSON.stringify(set.json)).toBe(201);
  expect(set.json.tasks).toBe(1);
  return { id: set.json.id as string, sha256 };
}

export const call = (id: string, name: string, args: unknown) => ({
  id,
  type: "function" as const,
  function: { name, arguments: JSON.stringify(args) },
});

/** Step `index`: one command appending the index to steps.log (a step applied twice shows there). */
export const appendStep = (index: number) => ({
  index,
  tool_calls: [call(`c${index}`, "run_terminal", { command: `echo ${index} >> steps.log` })],
});
