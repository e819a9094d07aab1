import { Hono } from "hono";
import { CreateWorkspaceRequest } from "../../protocol/schemas.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { createWorkspace, deleteWorkspace, getWorkspace, listWorkspaces } from "../db/workspaces.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const notFound = (id: string) => new ApiError("not_found", `No workspace \`${id}\` in your org.`);

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
    const workspace = await getWorkspace(database(c.env.DB), c.var.principal.org.id, c.req.param("id"));
    if (!workspace) throw notFound(c.req.param("id"));
    return c.json(workspace);
  })
  .delete("/:id", async (c) => {
    const db = database(c.env.DB);
    const workspace = await getWorkspace(db, c.var.principal.org.id, c.req.param("id"));
    if (!workspace) throw notFound(c.req.param("id"));
    // Object state first: if the D1 delete then fails, a retry still finds the row and finishes.
    await workspaceStub(c.env, workspace.id).destroy();
    await deleteWorkspace(db, workspace.id);
    return c.body(null, 204);
  });
