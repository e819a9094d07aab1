import { ALONE, nodeProject } from "./vitest.node.config.js";

/** `ALONE`'s files, after every other project, one at a time. */
export default nodeProject("node-alone", { include: ALONE, maxWorkers: 1, groupOrder: 3 });
