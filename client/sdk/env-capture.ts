/**
 * Captured rollouts, for training: the org's sealing key (`keys`), and its own `rollouts` and
 * `rollout_steps` rows read back an hour at a time (`rows`), content still sealed; `client/envs/export.ts`
 * opens them with the org's private key.
 */
import { OrgKey, RowsAnswer, type CaptureTable, type PutOrgKeyRequest } from "../../protocol/envs/capture.js";
import type { HttpClient } from "./http.js";

export class EnvCapture {
  constructor(private readonly http: HttpClient) {}

  readonly keys = {
    /** Sets the org's public key (owners only); the private key never leaves the caller. */
    put: (body: PutOrgKeyRequest) =>
      this.http.request({ method: "PUT", path: "/v1/envs/keys", body, schema: OrgKey, idempotent: true }),
    get: () => this.http.request({ method: "GET", path: "/v1/envs/keys", schema: OrgKey }),
  };

  /** The org's rows of `table` in one lake hour (the hour each rollout started). */
  rows(table: CaptureTable, q: { day: string; hour: string; run?: string; rollout?: string }) {
    return this.http.request({
      method: "GET",
      path: `/v1/envs/rows/${table}`,
      query: { day: q.day, hour: q.hour, run: q.run, rollout: q.rollout },
      schema: RowsAnswer,
    });
  }
}
