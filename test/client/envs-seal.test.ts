import { describe } from "vitest";
import { sealCases } from "../support/envs-seal-cases.js";

describe("rollout sealing in Node (the client that opens)", () => sealCases());
