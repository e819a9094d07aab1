import type { Command } from "commander";
import { client, type GlobalOptions } from "../context.js";
import { printFields, printJson } from "../output.js";

export function whoami(program: Command): void {
  program
    .command("whoami")
    .description("Show the org, user and API key this CLI is using, and which edge it talks to")
    .action(async (_opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant, resolved } = await client(options);
      const me = await sextant.me();
      if (options.json) return printJson({ ...me, baseURL: resolved.baseURL });
      printFields([
        ["Org", `${me.org.name} (${me.org.id}), plan ${me.org.plan}`],
        ["User", `${me.user.email} (${me.user.id}), ${me.user.role}`],
        [
          "Key",
          `${me.key.prefix}… "${me.key.name}" (${me.key.id})${me.key.expiresAt ? `, expires ${me.key.expiresAt}` : ""}`,
        ],
        ["Edge", `${resolved.baseURL} (from ${resolved.source})`],
      ]);
    });
}
