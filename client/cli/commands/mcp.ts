import { statSync } from "node:fs";
import { resolve } from "node:path";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { Command } from "commander";
import { z } from "zod";
import { CodebaseSearchArgs, codebaseSearchDescription } from "../../../protocol/search-tool.js";
import { VERSION } from "../../../protocol/version.js";
import { APIConnectionError, APIError, NotFoundError } from "../../sdk/errors.js";
import type { Sextant } from "../../sdk/client.js";
import { renderHits } from "../../workspace/render-hits.js";
import { OutsideWorkspaceError, scopeWithin, searchWorkspace, type LocalHit } from "../../workspace/search.js";
import { openWorkspace, WorkspaceNotIndexedError, type OpenWorkspace } from "../../workspace/session.js";
import { client, UsageError, type GlobalOptions } from "../context.js";

/** The tool's arguments, as the MCP SDK takes them (a shape): the same as the cloud agent's codebase_search. */
const SearchInput = CodebaseSearchArgs.shape;

const SearchOutput = {
  root: z.string().describe("The workspace root; hit paths are relative to it."),
  hits: z.array(
    z.object({
      path: z.string(),
      startLine: z.number().int(),
      endLine: z.number().int(),
      score: z.number(),
      snippet: z
        .string()
        .describe(
          "The lines as they are on disk now, secrets removed, from the one that matches the query best; at most 20 lines and 2,000 characters.",
        ),
      snippetLine: z.number().int().describe("The line the snippet starts at."),
      copies: z
        .array(z.object({ path: z.string(), startLine: z.number().int(), endLine: z.number().int() }))
        .describe("The same or nearly the same code elsewhere (build outputs, vendored copies), folded into this hit."),
      stale: z.boolean().describe("The file changed since it was indexed: the lines may no longer be what matched."),
    }),
  ),
};

/** The client and workspace a server answers from, once they are found. */
interface Target {
  sextant: Sextant;
  ws: OpenWorkspace;
}

/** A failure as one line an agent can act on; the stack is of no use to it. */
function explain(err: unknown, target: Target | undefined): string {
  const edge = target?.sextant.baseURL ?? "the edge";
  let message: string;
  if (err instanceof APIConnectionError) {
    message = `${err.message.replace(/\.$/, "")}; start the edge (\`npm start\` for a local one) or check the configured base URL.`;
  } else if (err instanceof NotFoundError && target) {
    message = `The workspace ${target.ws.entry.workspaceId} for ${target.ws.entry.root} no longer exists on ${edge}: run \`sextant workspace delete ${target.ws.entry.root} --yes\`, then \`sextant index\`.`;
  } else if (err instanceof APIError) {
    const ids = [err.code, err.requestId ? `request ${err.requestId}` : ""].filter(Boolean).join(", ");
    message = `The edge at ${edge} refused the search: ${err.message} [${ids}]`;
  } else {
    message = err instanceof Error ? err.message : String(err);
  }
  return message.replace(/\s*\n\s*/g, " ");
}

/** `path` as the workspace-relative directory `searchWorkspace` takes; absolute paths inside the root are accepted. */
function withinRoot(root: string, path: string | undefined): string | undefined {
  try {
    return scopeWithin(root, path);
  } catch (err) {
    if (err instanceof OutsideWorkspaceError)
      throw new UsageError(`path "${path}" is outside the workspace root ${root}.`);
    throw err;
  }
}

const log = (line: string) => process.stderr.write(`sextant mcp: ${line}\n`);

/**
 * The MCP server for one directory. The workspace is opened lazily and kept once found, so a server started
 * before `sextant index` (or `sextant login`) starts answering as soon as there is an index, without the
 * editor restarting it; until then every call says why it cannot.
 */
function buildServer(options: GlobalOptions, dir: string): { server: McpServer; open: () => Promise<Target> } {
  let target: Target | undefined;
  const open = async (): Promise<Target> => {
    if (target) return target;
    const { sextant } = await client(options);
    try {
      target = { sextant, ws: await openWorkspace(sextant, dir) };
    } catch (err) {
      if (err instanceof WorkspaceNotIndexedError)
        throw new WorkspaceNotIndexedError(
          `${dir} is not indexed on ${sextant.baseURL} yet: run \`sextant index ${dir}\`, then search again.`,
        );
      throw err;
    }
    return target;
  };

  const server = new McpServer({ name: "sextant", version: VERSION });
  server.registerTool(
    "codebase_search",
    {
      title: "Search the codebase",
      description: codebaseSearchDescription(`the indexed codebase at ${dir}`),
      inputSchema: SearchInput,
      outputSchema: SearchOutput,
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    },
    async ({ query, topK, path }, extra) => {
      try {
        const { sextant, ws } = await open();
        const within = withinRoot(ws.entry.root, path);
        const { hits } = await searchWorkspace(sextant, ws, query, {
          topK,
          signal: extra.signal,
          ...(within ? { within } : {}),
        });
        return {
          content: [{ type: "text", text: renderHits(ws.entry.root, hits, within) }],
          structuredContent: { root: ws.entry.root, hits },
        };
      } catch (err) {
        const message = explain(err, target);
        log(`codebase_search failed: ${message}`);
        return { content: [{ type: "text", text: message }], isError: true };
      }
    },
  );
  return { server, open };
}

/**
 * Resolves when the editor goes away. At the end of input, answers still in flight are written before the
 * process exits (a piped client reads them); a signal, or the transport closing, stops the server at once.
 */
async function untilDisconnected(server: McpServer): Promise<void> {
  const signals = ["SIGINT", "SIGTERM"] as const;
  let stop = () => {};
  const reason = await new Promise<"eof" | "stop">((done) => {
    stop = () => done("stop");
    process.stdin.once("end", () => done("eof"));
    server.server.onclose = stop;
    for (const signal of signals) process.once(signal, stop);
  });
  // Once done, a signal gets its default meaning back: exit now, even with an answer in flight.
  for (const signal of signals) process.off(signal, stop);
  if (reason === "stop") await server.close();
}

export function mcp(program: Command): void {
  program
    .command("mcp")
    .description("Serve codebase_search to AI agents over MCP (stdio), for the workspace of a directory")
    .argument("[dir]", "the workspace root or a directory inside it", ".")
    .action(async (dir: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      // A directory that does not exist is a mistake in the editor's configuration, never fixed by waiting;
      // anything else (not indexed yet, no key, the edge down) is reported by the tool, where the agent sees it.
      const absolute = resolve(dir);
      if (!statSync(absolute, { throwIfNoEntry: false })?.isDirectory())
        throw new UsageError(`${absolute} is not a directory.`);
      const { server, open } = buildServer(options, absolute);
      try {
        const { ws, sextant } = await open();
        log(`serving ${ws.entry.root} (workspace ${ws.entry.workspaceId} on ${sextant.baseURL})`);
      } catch (err) {
        log(`${explain(err, undefined)} codebase_search reports this until it is fixed.`);
      }
      await server.connect(new StdioServerTransport());
      await untilDisconnected(server);
    });
}
