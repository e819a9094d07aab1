import { describe, expect, it } from "vitest";
import { readHarborTask, TaskRefused, type HarborTask } from "../../protocol/envs/harbor.js";
import { taskFiles } from "./harbor-fixtures.js";

const text = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array | undefined) => new TextDecoder().decode(b);

/** The `plain` fixture with some files replaced or added. */
function variant(changes: Record<string, string | null>): Map<string, Uint8Array> {
  const { files } = taskFiles("plain");
  for (const [path, content] of Object.entries(changes))
    if (content === null) files.delete(path);
    else files.set(path, text(content));
  return files;
}

function refusal(files: Map<string, Uint8Array>): TaskRefused {
  try {
    readHarborTask(files);
  } catch (err) {
    if (err instanceof TaskRefused) return err;
    throw err;
  }
  throw new Error("the task was not refused");
}

describe("reading a Harbor task", () => {
  it("places a Dockerfile's COPYs under its WORKDIR, sets its ENV, and honours task.toml's settings", () => {
    const { files, executable } = taskFiles("greeting");
    const task: HarborTask = readHarborTask(files, { executable });
    expect(task.instruction).toContain("Hello, NAME!");
    expect([...task.startingTree.keys()].sort()).toEqual(["README.md", "src/greet.py"]);
    expect(decode(task.startingTree.get("src/greet.py")?.bytes)).toContain('print("Hi")');
    expect([...task.tests.keys()].sort()).toEqual(["score.py", "test.sh"]);
    expect(task.tests.get("test.sh")?.executable).toBe(true);
    expect([...(task.solution?.keys() ?? [])]).toEqual(["solve.sh"]);
    expect(task.settings).toMatchObject({
      verifierTimeoutSec: 60,
      agentTimeoutSec: 300,
      cpus: 1,
      memoryMb: 1024,
      storageMb: 256,
      workdir: "/app",
      env: { PYTHONDONTWRITEBYTECODE: "1", GREETER_MODE: "plain" },
      verifierEnv: { GREETING_CASES: "Ada,Grace" },
      solutionEnv: {},
    });
    expect(task.settings.noted.join("\n")).toContain("FROM python:3.12-slim");
  });

  it("takes environment/'s files as the tree when there is no Dockerfile, with Harbor's defaults", () => {
    const task = readHarborTask(taskFiles("plain").files);
    expect([...task.startingTree.keys()]).toEqual(["answer.txt"]);
    expect(task.solution).toBeUndefined();
    expect(task.settings).toMatchObject({
      verifierTimeoutSec: 30,
      agentTimeoutSec: null,
      memoryMb: 2048,
      storageMb: 8192,
      workdir: null,
    });
  });

  it("caps what a task asks for", () => {
    const task = readHarborTask(
      variant({ "task.toml": "[verifier]\ntimeout_sec = 99999\n[environment]\nmemory_mb = 999999\n" }),
    );
    expect(task.settings.verifierTimeoutSec).toBe(3600);
    expect(task.settings.memoryMb).toBe(16_384);
  });

  it.each([
    ["RUN", "FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y jq\n", 3, "do not build images"],
    ["USER", "FROM ubuntu:24.04\n\nUSER nobody\n", 3, "USER"],
    ["EXPOSE", "FROM x\nEXPOSE 80\n", 2, "EXPOSE"],
    ["CMD", 'FROM x\nCMD ["python3", "app.py"]\n', 2, "CMD"],
    ["remote ADD", "FROM x\nWORKDIR /app\nADD https://example.com/a.txt a.txt\n", 3, "URL"],
    ["a second stage", "FROM x AS build\nFROM y\n", 2, "multi-stage"],
    ["COPY --from", "FROM x\nWORKDIR /app\nCOPY --from=build /out .\n", 3, "--from"],
    ["a missing source", "FROM x\nWORKDIR /app\nCOPY nothing.txt .\n", 3, "no such file"],
    ["a copy outside the workdir", "FROM x\nWORKDIR /app\nCOPY answer.txt /etc/answer.txt\n", 3, "outside WORKDIR"],
    ["a workdir on the system", "FROM x\nWORKDIR /usr/src/app\nCOPY answer.txt .\n", 2, "cannot be mounted"],
    ["a continued RUN", "FROM x\n# a comment\nRUN echo a \\\n  && echo b\nWORKDIR /app\n", 3, "RUN"],
  ])("refuses a Dockerfile with %s, naming its line", (_, dockerfile, line, why) => {
    const err = refusal(variant({ "environment/Dockerfile": dockerfile }));
    expect(err.file).toBe("environment/Dockerfile");
    expect(err.line).toBe(line);
    expect(err.reason).toContain(why);
  });

  it.each([
    ["allow_internet = true", "[environment]\nallow_internet = true\n", 2, "no network"],
    ["a GPU", "[metadata]\nname = 'x'\n\n[environment]\ncpus = 2\ngpus = 1\n", 6, "no GPU"],
    ["a prebuilt image and no Dockerfile", '[environment]\ndocker_image = "ubuntu:24.04"\n', 2, "prebuilt image"],
    ["an env value from the host", '[verifier.env]\nOPENAI_API_KEY = "${OPENAI_API_KEY}"\n', 2, "host's environment"],
    ["a negative timeout", "[verifier]\ntimeout_sec = -1\n", 2, "positive"],
    ["MCP servers", '[environment]\nmcp_servers = [{ name = "x", url = "http://x" }]\n', 2, "services"],
    ["bad TOML", "[verifier]\ntimeout_sec = \n", 2, "not valid TOML"],
  ])("refuses a task.toml with %s, naming its line", (_, toml, line, why) => {
    const err = refusal(variant({ "task.toml": toml }));
    expect(err.file).toBe("task.toml");
    expect(err.line).toBe(line);
    expect(err.reason).toContain(why);
  });

  it("notes a docker_image beside a Dockerfile and ignores [metadata]", () => {
    const task = readHarborTask(
      variant({
        "task.toml": '[metadata]\nanything = { deep = 1 }\n[environment]\ndocker_image = "ubuntu"\n',
        "environment/Dockerfile": "FROM ubuntu\nWORKDIR /srv/task\nCOPY answer.txt notes/\n",
      }),
    );
    expect([...task.startingTree.keys()]).toEqual(["notes/answer.txt"]);
    expect(task.settings.workdir).toBe("/srv/task");
    expect(task.settings.noted.join("\n")).toContain("docker_image ubuntu");
  });

  it("refuses a task without an instruction, a task.toml or tests/test.sh", () => {
    expect(refusal(variant({ "instruction.md": null })).file).toBe("instruction.md");
    expect(refusal(variant({ "task.toml": null })).file).toBe("task.toml");
    expect(refusal(variant({ "tests/test.sh": null })).file).toBe("tests/test.sh");
  });
});
