import { describe } from "vitest";
import { sealCases } from "../support/envs-seal-cases.js";

describe("rollout sealing in workerd (the edge that seals)", () => sealCases());
