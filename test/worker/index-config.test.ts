import { describe, expect, it } from "vitest";
import { ConfigError, loadIndexConfig } from "../../workers/config.js";

describe("index backend settings", () => {
  it("defaults to the embedded R2 backend", () => {
    expect(loadIndexConfig({} as Env).INDEX_BACKEND).toBe("r2");
  });

  it("requires the Turbopuffer key, naming the setting but never a value", () => {
    const bad = { INDEX_BACKEND: "turbopuffer", TURBOPUFFER_REGION: "Not A Region!" } as unknown as Env;
    expect(() => loadIndexConfig(bad)).toThrow(ConfigError);
    expect(() => loadIndexConfig(bad)).toThrow(/TURBOPUFFER_API_KEY: required when INDEX_BACKEND is turbopuffer/);
    expect(() => loadIndexConfig(bad)).toThrow(/TURBOPUFFER_REGION/);
    expect(() => loadIndexConfig(bad)).not.toThrow(/Not A Region/);
  });

  it("refuses an unknown backend", () => {
    expect(() => loadIndexConfig({ INDEX_BACKEND: "pinecone" } as unknown as Env)).toThrow(/INDEX_BACKEND/);
  });

  it("accepts a complete Turbopuffer configuration", () => {
    const env = { INDEX_BACKEND: "turbopuffer", TURBOPUFFER_API_KEY: "tpuf_x", TURBOPUFFER_REGION: "gcp-us-central1" };
    expect(loadIndexConfig(env as unknown as Env)).toMatchObject({ INDEX_BACKEND: "turbopuffer" });
  });
});
