import type { Command } from "commander";
import { API_KEY_PREFIX, isWellFormedApiKey } from "../../../protocol/api-key.js";
import { Sextant } from "../../sdk/client.js";
import { credentialsPath, removeFile, writeSecretFile } from "../credentials.js";
import { UsageError, type GlobalOptions } from "../context.js";
import { printJson } from "../output.js";

export function login(program: Command): void {
  program
    .command("login")
    .description("Save an edge URL and API key for later commands (checked against the edge first)")
    .action(async (_opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const apiKey = options.apiKey ?? process.env.SEXTANT_API_KEY;
      const baseURL = options.baseUrl ?? process.env.SEXTANT_BASE_URL;
      if (!apiKey || !baseURL)
        throw new UsageError("Give both --base-url and --api-key (or SEXTANT_BASE_URL and SEXTANT_API_KEY).");
      // A typo is the user's to fix, not the edge's to refuse: the key's checksum tells at once.
      if (!isWellFormedApiKey(apiKey))
        throw new UsageError(
          `That is not a Sextant API key (they start with ${API_KEY_PREFIX} and end in a checksum).`,
        );
      const me = await new Sextant({ apiKey, baseURL }).me();
      await writeSecretFile(credentialsPath(), { baseURL, apiKey });
      if (options.json) return printJson({ ...me, baseURL, path: credentialsPath() });
      process.stdout.write(
        `Logged in to ${baseURL} as ${me.user.email} (${me.org.name}). Saved to ${credentialsPath()}.\n`,
      );
    });

  program
    .command("logout")
    .description("Forget the saved edge URL and API key")
    .action(async (_opts, cmd: Command) => {
      const removed = await removeFile(credentialsPath());
      if (cmd.optsWithGlobals<GlobalOptions>().json) return printJson({ loggedOut: true, removed });
      process.stdout.write(
        removed ? `Removed ${credentialsPath()}.\n` : `Not logged in: there was no ${credentialsPath()}.\n`,
      );
    });
}
