import type { Command } from "commander";
import type { ApiKeyInfo, CreatedApiKey } from "../../../protocol/schemas.js";
import { client, type GlobalOptions } from "../context.js";
import { parseExpiry, printJson, printTable, shortDate } from "../output.js";

export function printKeys(keys: ApiKeyInfo[]): void {
  printTable(keys, [
    ["id", (k) => k.id],
    ["name", (k) => k.name],
    ["prefix", (k) => `${k.prefix}…`],
    ["user", (k) => k.userId],
    ["created", (k) => shortDate(k.createdAt)],
    ["expires", (k) => shortDate(k.expiresAt)],
    ["last used", (k) => shortDate(k.lastUsedAt)],
    [
      "status",
      (k) => (k.revokedAt ? "revoked" : k.expiresAt && Date.parse(k.expiresAt) <= Date.now() ? "expired" : "active"),
    ],
  ]);
}

export function printCreatedKey(key: CreatedApiKey): void {
  process.stdout.write(`Created key ${key.id} "${key.name}"${key.expiresAt ? `, expires ${key.expiresAt}` : ""}.\n`);
  process.stdout.write(`\n  ${key.key}\n\nStore it now: it is shown only once.\n`);
}

export function keys(program: Command): void {
  const keys = program
    .command("keys")
    .description("Manage API keys of your org (owners see every key, members their own)");

  keys
    .command("list")
    .description("List API keys")
    .action(async (_opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const list = await (await client(options)).sextant.keys.list();
      if (options.json) return printJson(list);
      printKeys(list);
    });

  keys
    .command("create")
    .description("Create an API key for yourself; the secret is printed once")
    .argument("<name>", "a label, such as the machine it is for")
    .option("--expires <when>", "30d, 12h, 45m or an ISO date")
    .action(async (name: string, opts: { expires?: string }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const created = await (
        await client(options)
      ).sextant.keys.create({
        name,
        ...(opts.expires ? { expiresAt: parseExpiry(opts.expires) } : {}),
      });
      if (options.json) return printJson(created);
      printCreatedKey(created);
    });

  keys
    .command("revoke")
    .description("Revoke an API key; it stops working within the edge's key cache TTL (30 s by default)")
    .argument("<id>", "the key id, such as key_…")
    .action(async (id: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const revoked = await (await client(options)).sextant.keys.revoke(id);
      if (options.json) return printJson(revoked);
      process.stdout.write(`Revoked ${revoked.id} "${revoked.name}" at ${revoked.revokedAt}.\n`);
    });
}
