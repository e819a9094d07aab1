/** The one place that knows how a workspace id maps to its Durable Object. */
export function workspaceStub(env: Env, workspaceId: string) {
  return env.WORKSPACE.get(env.WORKSPACE.idFromName(workspaceId));
}
