/**
 * `sextant envs keygen` and `sextant envs export`: the org's sealing key pair (the private half
 * written to a file only the user can read, the public half registered with the edge), and its
 * captured rollouts opened with that file as TRL JSON lines and Harbor ATIF trajectories.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Command } from "commander";
import { toBase64url } from "../../../protocol/base64.js";
import { keyFingerprint } from "../../../protocol/envs/capture.js";
import { generateOrgKeyPair } from "../../../protocol/envs/seal.js";
import { LakeDay, LakeHour, type LakeRow } from "../../../protocol/lake.js";
import { VERSION } from "../../../protocol/version.js";
import { atifTrajectory, openRollouts, trlRecord } from "../../envs/export.js";
import { EnvCapture } from "../../sdk/env-capture.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson } from "../output.js";

/** What `keygen` writes: the private key as a JWK, with the id rows name it by. */
export interface KeyFile {
  keyId: string;
  publicKey: string;
  privateJwk: JsonWebKey;
}

export function readKeyFile(path: string): KeyFile {
  let parsed: Partial<KeyFile>;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<KeyFile>;
  } catch (err) {
    throw new UsageError(`--key ${path}: not a key file sextant envs keygen wrote (${(err as Error).message}).`);
  }
  if (!parsed.privateJwk || typeof parsed.keyId !== "string")
    throw new UsageError(`--key ${path}: not a key file sextant envs keygen wrote.`);
  return parsed as KeyFile;
}

export function envCapture(program: Command): void {
  const envs =
    program.commands.find((c) => c.name() === "envs") ??
    program.command("envs").description("Environments: task sets, sessions and rollouts for training");

  envs
    .command("keygen")
    .description(
      "Make the org's X25519 key pair for sealing rollouts: keep the private key file; the public key is registered",
    )
    .requiredOption("--out <file>", "where to write the private key (created 0600; never overwritten)")
    .option("--key-id <id>", "the key's id in every row sealed to it (default: the public key's fingerprint)")
    .option("--no-register", "only write the file; register the public key later")
    .action(async (opts: { out: string; keyId?: string; register: boolean }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const pair = await generateOrgKeyPair();
      const publicKey = toBase64url(pair.publicKey);
      const keyId = opts.keyId ?? (await keyFingerprint(pair.publicKey));
      const file: KeyFile = { keyId, publicKey, privateJwk: pair.privateJwk };
      try {
        // `wx`: an existing key file is never replaced, since rows sealed to it open only with it.
        writeFileSync(opts.out, `${JSON.stringify(file, null, 2)}\n`, { mode: 0o600, flag: "wx" });
      } catch (err) {
        throw new UsageError(
          `--out ${opts.out}: ${(err as NodeJS.ErrnoException).code === "EEXIST" ? "exists; choose another file" : (err as Error).message}.`,
        );
      }
      let registered = false;
      if (opts.register) {
        const { sextant } = await client(options);
        await new EnvCapture(sextant.http).keys.put({ publicKey, keyId });
        registered = true;
      }
      if (options.json) return printJson({ keyId, publicKey, file: opts.out, registered });
      process.stdout.write(
        `Wrote the private key ${keyId} to ${opts.out} (keep it: rollouts sealed to it open only with it).\n` +
          (registered ? "Registered its public key: new rollouts are sealed to it.\n" : `Public key: ${publicKey}\n`),
      );
    });

  envs
    .command("export")
    .description("Open the org's captured rollouts with its private key: TRL JSON lines and Harbor ATIF trajectories")
    .requiredOption("--out <dir>", "the directory to write trl.jsonl and atif/<rollout>.json to")
    .requiredOption("--key <file>", "the private key file sextant envs keygen wrote")
    .option("--run <id>", "only this run's rollouts")
    .option("--day <yyyy-mm-dd>", "the UTC day the rollouts started (default: today)")
    .option("--hour <hh>", "only this UTC hour of the day")
    .action(async (opts: { out: string; key: string; run?: string; day?: string; hour?: string }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const keyFile = readKeyFile(opts.key);
      const day = opts.day ?? new Date().toISOString().slice(0, 10);
      if (!LakeDay.safeParse(day).success) throw new UsageError(`--day takes a date as YYYY-MM-DD, not "${day}".`);
      if (opts.hour !== undefined && !LakeHour.safeParse(opts.hour).success)
        throw new UsageError(`--hour takes 00 to 23, not "${opts.hour}".`);
      const hours =
        opts.hour !== undefined ? [opts.hour] : Array.from({ length: 24 }, (_, h) => String(h).padStart(2, "0"));
      const { sextant } = await client(options);
      const capture = new EnvCapture(sextant.http);
      const rollouts: LakeRow[] = [];
      const steps: LakeRow[] = [];
      for (const hour of hours) {
        const q = { day, hour, ...(opts.run ? { run: opts.run } : {}) };
        rollouts.push(...(await capture.rows("rollouts", q)).rows);
        steps.push(...(await capture.rows("rollout_steps", q)).rows);
      }
      const opened = await openRollouts(keyFile.privateJwk, rollouts, steps);
      mkdirSync(join(opts.out, "atif"), { recursive: true });
      writeFileSync(join(opts.out, "trl.jsonl"), opened.map((r) => `${JSON.stringify(trlRecord(r))}\n`).join(""));
      for (const r of opened)
        writeFileSync(
          join(opts.out, "atif", `${String(r.row.rollout_id)}.json`),
          `${JSON.stringify(atifTrajectory(r, { name: "sextant", version: VERSION }), null, 2)}\n`,
        );
      const summary = { rollouts: opened.length, steps: opened.reduce((n, r) => n + r.steps.length, 0), out: opts.out };
      if (options.json) return printJson(summary);
      process.stdout.write(`Exported ${summary.rollouts} rollouts (${summary.steps} steps) to ${opts.out}.\n`);
    });
}
