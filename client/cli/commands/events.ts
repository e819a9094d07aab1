import { readFileSync } from "node:fs";
import type { Command } from "commander";
import type { EditorEvent } from "../../../protocol/events.js";
import { SextantError } from "../../sdk/errors.js";
import { withIdentity, type NewEvent } from "../../sdk/events.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson } from "../output.js";

/** Some events were refused: exit code 1, after each refusal has been named. */
export class EventsRefusedError extends SextantError {
  override name = "EventsRefusedError";
}

/** Events from a JSON array or JSON lines; an event without `id` or `at` gets a fresh id and now. */
export function parseEvents(text: string): EditorEvent[] {
  const trimmed = text.trim();
  let values: unknown[];
  try {
    values = trimmed.startsWith("[")
      ? (JSON.parse(trimmed) as unknown[])
      : trimmed
          .split("\n")
          .filter((line) => line.trim())
          .map((line) => JSON.parse(line) as unknown);
  } catch (err) {
    throw new UsageError(`The events are not a JSON array or JSON lines: ${(err as Error).message}`);
  }
  // Anything but an object goes as it is, for the edge to refuse with its reason.
  return values.map((v) =>
    v && typeof v === "object" && !Array.isArray(v) ? withIdentity(v as NewEvent) : (v as EditorEvent),
  );
}

export function eventCommands(program: Command): void {
  const events = program
    .command("events")
    .description('Editor events for the lake (docs/data-pipeline.md, "Sending events")');
  events
    .command("send")
    .description("Send editor events from a file (a JSON array or JSON lines), or standard input with -")
    .argument("<file>", "the events, or - for standard input")
    .action(async (file: string, _opts, cmd: Command) => {
      const globals = cmd.optsWithGlobals<GlobalOptions>();
      const list = parseEvents(readFileSync(file === "-" ? 0 : file, "utf8"));
      if (list.length === 0) throw new UsageError("There are no events to send.");
      const { sextant } = await client(globals);
      const answer = await sextant.events.send(list);
      if (globals.json) printJson(answer);
      else {
        process.stdout.write(
          `Sent ${answer.accepted} events${answer.duplicates ? ` (${answer.duplicates} repeated)` : ""}.\n`,
        );
        for (const r of answer.refused)
          process.stderr.write(`Refused event ${r.index} (${r.id ?? "no id"}): ${r.code}: ${r.detail}\n`);
      }
      if (answer.refused.length)
        throw new EventsRefusedError(`${answer.refused.length} of ${list.length} events were refused.`);
    });
}
