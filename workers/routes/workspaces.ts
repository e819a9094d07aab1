import { Hono, type Context } from "hono";
import { CreateWorkspaceRequest, type WorkspaceDetail } from "../../protocol/schemas.js";
import { embedBuiltin } from "../../protocol/embedder/builtin.js";
import { CommitRequest, DiffRequest, SearchRequest } from "../../protocol/sync.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { createWorkspace, deleteWorkspace, getWorkspace, listWorkspaces } from "../db/workspaces.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";
import { vectorKey } from "../vector-key.js";

const notFound = (id: string) => new ApiError("not_found", `No workspace \`${id}\` in your org.`);

/** The caller's workspace, or 404: another org's workspace is indistinguishable from a missing one. */
async function ownWorkspace(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  const workspace = await getWorkspace(database(c.env.DB), c.var.principal.org.id, id);
  if (!workspace) throw notFound(id);
  return { workspace, stub: workspaceStub(c.env, workspace.id) };
}

/** Runs a Durable Object call, reports its duration as Server-Timing, and maps "gone" to 404. */
async function timed<T>(c: Context<AppEnv>, id: string, call: () => Promise<T | null>): Promise<T> {
  const started = performance.now();
  const result = await call();
  c.header("Server-Timing", `workspace;dur=${(performance.now() - started).toFixed(1)}`);
  if (result === null) throw notFound(id);
  return result;
}

export const workspaces = new Hono<AppEnv>()
  .use(requireApiKey)
  .post("/", async (c) => {
    const { name } = await jsonBody(c, CreateWorkspaceRequest);
    const org = c.var.principal.org;
    const workspace = await createWorkspace(database(c.env.DB), org.id, name);
    await workspaceStub(c.env, workspace.id).init({
      workspaceId: workspace.id,
      orgId: org.id,
      createdAt: workspace.createdAt,
    });
    return c.json(workspace, 201);
  })
  .get("/", async (c) => c.json({ data: await listWorkspaces(database(c.env.DB), c.var.principal.org.id) }))
  .get("/:id", async (c) => {
    const { workspace, stub } = await ownWorkspace(c);
    const tree = await timed(c, workspace.id, () => stub.status());
    return c.json({ ...workspace, tree } satisfies WorkspaceDetail);
  })
  .delete("/:id", async (c) => {
    const db = database(c.env.DB);
    const { workspace, stub } = await ownWorkspace(c);
    // Object state first: if the D1 delete then fails, a retry still finds the row and finishes.
    await stub.destroy();
    await deleteWorkspace(db, workspace.id);
    return c.body(null, 204);
  })
  .get("/:id/tree", async (c) => {
    const { workspace, stub } = await ownWorkspace(c);
    return c.json(await timed(c, workspace.id, () => stub.status()));
  })
  .post("/:id/tree/diff", async (c) => {
    const body = await jsonBody(c, DiffRequest);
    const { workspace, stub } = await ownWorkspace(c);
    return c.json(await timed(c, workspace.id, () => stub.diff(body)));
  })
  .post("/:id/tree/commit", async (c) => {
    const body = await jsonBody(c, CommitRequest);
    const hasChunks = body.upserts.some((u) => u.chunks.length > 0);
    const key = hasChunks ? vectorKey(c) : undefined;
    const { workspace, stub } = await ownWorkspace(c);
    // Embedded here, in the Worker, so the text and the key stop at this request.
    const chunks = body.upserts.flatMap((u) =>
      u.chunks.map((chunk) => ({
        path: u.path,
        chunkId: chunk.id,
        startLine: chunk.startLine,
        endLine: chunk.endLine,
        vector: key!.apply(embedBuiltin(chunk.text)),
      })),
    );
    const tree = { upserts: body.upserts.map(({ path, hash, size }) => ({ path, hash, size })), deletes: body.deletes };
    return c.json(await timed(c, workspace.id, () => stub.commit(tree, chunks)));
  })
  .post("/:id/search", async (c) => {
    const body = await jsonBody(c, SearchRequest);
    const key = vectorKey(c);
    const { workspace, stub } = await ownWorkspace(c);
    const query = key.apply(embedBuiltin(body.query));
    return c.json(await timed(c, workspace.id, () => stub.search(query, body.topK, body.pathPrefix)));
  });
