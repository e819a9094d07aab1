import { Command, CommanderError } from "commander";
import { VERSION } from "../../protocol/version.js";
import { admin } from "./commands/admin.js";
import { agentCommands } from "./commands/agent.js";
import { envCapture } from "./commands/env-capture.js";
import { envPush } from "./commands/env-push.js";
import { envRollouts } from "./commands/env-rollouts.js";
import { evalCommands } from "./commands/eval.js";
import { eventCommands } from "./commands/events.js";
import { keys } from "./commands/keys.js";
import { login } from "./commands/login.js";
import { mcp } from "./commands/mcp.js";
import { usage } from "./commands/usage.js";
import { whoami } from "./commands/whoami.js";
import { workspaceCommands } from "./commands/workspace.js";
import { EXIT, exitCodeFor, printError } from "./output.js";

export function buildProgram(): Command {
  const program = new Command()
    .name("sextant")
    .description("Private semantic code search and an inference gateway for AI code editors, at the edge.")
    .version(VERSION)
    .option("--base-url <url>", "the Sextant edge (default: SEXTANT_BASE_URL, your login, or the local edge)")
    .option("--api-key <key>", "an API key (default: SEXTANT_API_KEY, your login, or the local dev key)")
    .option("--admin-secret <secret>", "the edge's admin secret, for `sextant admin` (default: SEXTANT_ADMIN_SECRET)")
    .option("--timeout <seconds>", "per-request timeout")
    .option("--json", "print machine-readable JSON")
    .showHelpAfterError()
    // Each subcommand's --help lists these too: they apply to every command.
    .configureHelp({ showGlobalOptions: true })
    .exitOverride();
  for (const register of [
    whoami,
    workspaceCommands,
    mcp,
    agentCommands,
    envPush,
    envRollouts,
    envCapture,
    evalCommands,
    eventCommands,
    keys,
    usage,
    admin,
    login,
  ])
    register(program);
  // Every subcommand, at any depth, reports usage errors through exitOverride instead of exiting itself.
  const visit = (cmd: Command) => cmd.commands.forEach((sub) => visit(sub.exitOverride()));
  visit(program);
  return program;
}

/**
 * A reader that stops early (`sextant search … | head -1`) closes the pipe: the rest of the output
 * has nowhere to go, which is an ordinary end, not an error with a stack trace.
 */
let quiet = false;
function quietOnClosedPipe(): void {
  if (quiet) return;
  quiet = true;
  for (const stream of [process.stdout, process.stderr])
    stream.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EPIPE") throw err;
      process.exit(process.exitCode ?? EXIT.ok);
    });
}

export async function main(argv: string[]): Promise<number> {
  quietOnClosedPipe();
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: "user" });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version are successful exits; anything else commander raises is a usage error.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    printError(err, Boolean(program.opts().json));
    return exitCodeFor(err);
  }
}
