/**
 * What a sandbox's user leaves behind outside its control groups and its disk: processes (where the
 * host has no control groups, or a daemon that left them) and files in the machine's shared
 * temporary directories (under `direct`, whose commands see the machine's /tmp). Both are removed as
 * that user, so the removal can reach nothing the user could not.
 */
import { spawn } from "node:child_process";

/** Whether a process of that pid exists (one of another user's counts too). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

const asUser = (uid: number) => [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups"];

function runAs(uid: number, argv: string[], timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn("setpriv", [...asUser(uid), ...argv], { stdio: "ignore" });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child
      .on("error", () => {
        clearTimeout(timer);
        resolve();
      })
      .on("exit", () => {
        clearTimeout(timer);
        resolve();
      });
  });
}

/** SIGKILLs every process of a uid (`kill -1` reaches all the processes it may signal). */
export const killUid = (uid: number) => runAs(uid, ["sh", "-c", "kill -9 -1"], 10_000);

/** Removes what a uid left in /tmp, /var/tmp and /dev/shm (`find -delete` never follows links). */
export const sweepShared = (uid: number) =>
  runAs(
    uid,
    ["find", "/tmp", "/var/tmp", "/dev/shm", "-xdev", "-mindepth", "1", "-user", String(uid), "-delete"],
    10_000,
  );
