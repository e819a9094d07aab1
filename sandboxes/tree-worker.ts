/**
 * The code of the host's worker threads (`tree-pool.ts`), as source: evaluated with `eval: true`, so
 * it needs no file of its own wherever the host runs (tsx, a test runner, an esbuild bundle). It does
 * the work on a tree that can take long or hold much: `grep`'s scan and the diff. Files are reached
 * one component at a time from the tree's root with `O_NOFOLLOW` (symlinks are never followed),
 * opened with `O_NONBLOCK` and read only when they are regular files of the sandbox's user under
 * their size cap: a FIFO, a device or a swapped symlink costs the scan nothing.
 *
 * A diff needs jsdiff, which the host resolves to a path (`diffModule`) the worker requires. Each
 * file's patch is bounded by an edit length and a time; a file past either is written as a whole
 * replacement, which `git apply` takes just the same, and a file past `maxFileBytes` is listed in
 * `skipped`, not diffed.
 */
export const TREE_WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const fs = require("node:fs");
const { createHash } = require("node:crypto");
const C = fs.constants;
const DIR = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
const FILE = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK;
const at = (fd, name) => "/proc/self/fd/" + fd + "/" + name;

/** Opens the directory at tree path parts, no symlink followed; -1 when it is not one. */
function openDir(root, parts) {
  let fd;
  try { fd = fs.openSync(root, DIR); } catch { return -1; }
  for (const part of parts) {
    let next;
    try { next = fs.openSync(at(fd, part), DIR); } catch { next = -1; }
    fs.closeSync(fd);
    if (next < 0) return -1;
    fd = next;
  }
  return fd;
}

/** Visits the regular-looking entries below a directory, depth first by name: visit(dirFd, name, rel, level). */
function walk(root, startParts, opts, visit) {
  const skip = new Set(opts.skipDirs);
  let count = 0;
  const go = (fd, rel, level) => {
    let entries;
    try { entries = fs.readdirSync("/proc/self/fd/" + fd, { withFileTypes: true }); } catch { return true; }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const path = rel + entry.name;
      if (entry.isDirectory()) {
        if (level >= opts.maxDepth || skip.has(entry.name)) continue;
        let child;
        try { child = fs.openSync(at(fd, entry.name), DIR); } catch { continue; }
        try { if (!go(child, path + "/", level + 1)) return false; } finally { fs.closeSync(child); }
        continue;
      }
      if (++count > opts.maxFiles) return false;
      if (visit(fd, entry.name, path, level) === false) return false;
    }
    return true;
  };
  const fd = openDir(root, startParts);
  if (fd < 0) return true;
  try { return go(fd, startParts.length ? startParts.join("/") + "/" : "", 1); } finally { fs.closeSync(fd); }
}

/** A file's bytes when it is a regular file of the owner under max bytes; else a reason. */
function readAt(dirFd, name, max, owner) {
  let fd;
  try { fd = fs.openSync(at(dirFd, name), FILE); } catch (e) { return { skip: e.code === "ELOOP" ? "symlink" : "unreadable" }; }
  try {
    const info = fs.fstatSync(fd);
    if (!info.isFile()) return { skip: "not_regular" };
    if (owner !== null && info.uid !== owner) return { skip: "not_owned" };
    if (info.size > max) return { skip: "too_large" };
    const bytes = Buffer.allocUnsafe(info.size);
    let read = 0;
    while (read < info.size) {
      const n = fs.readSync(fd, bytes, read, info.size - read, read);
      if (n === 0) break;
      read += n;
    }
    return { bytes: bytes.subarray(0, read) };
  } finally {
    fs.closeSync(fd);
  }
}

/** A SHA-256 of a regular file of any size, read in pieces (a large file's change is told by it). */
function hashAt(dirFd, name, owner) {
  let fd;
  try { fd = fs.openSync(at(dirFd, name), FILE); } catch { return undefined; }
  try {
    const info = fs.fstatSync(fd);
    if (!info.isFile() || (owner !== null && info.uid !== owner)) return undefined;
    const hash = createHash("sha256");
    const piece = Buffer.allocUnsafe(1 << 20);
    for (let n; (n = fs.readSync(fd, piece, 0, piece.length, null)) > 0; ) hash.update(piece.subarray(0, n));
    return hash.digest("hex");
  } finally {
    fs.closeSync(fd);
  }
}

function grep(job) {
  const regex = new RegExp(job.pattern, job.ignoreCase ? "i" : "");
  const matches = [];
  let bytes = 0;
  let truncated = false;
  walk(job.root, job.dir, job, (dirFd, name, rel) => {
    const file = readAt(dirFd, name, job.maxFileBytes, job.owner);
    if (!file.bytes || file.bytes.subarray(0, job.sniffBytes).includes(0)) return true;
    const lines = file.bytes.toString("utf8").split("\\n");
    for (let i = 0; i < lines.length; i++) {
      if (!regex.test(lines[i])) continue;
      const text = lines[i].slice(0, 500);
      bytes += text.length + rel.length + 16;
      if (matches.length >= job.maxResults || bytes > job.outputBytes) {
        truncated = true;
        return false;
      }
      matches.push({ path: rel, line: i + 1, text });
    }
    return true;
  });
  return { matches, truncated };
}

/** One side of a diff: the file at a tree path (no symlink followed), or why it is not read; a large file's hash. */
function side(root, rel, max, owner) {
  const parts = rel.split("/");
  const name = parts.pop();
  const dirFd = openDir(root, parts);
  if (dirFd < 0) return { skip: "unreadable" };
  try {
    const file = readAt(dirFd, name, max, owner);
    if (file.skip === "too_large") file.hash = hashAt(dirFd, name, owner);
    return file;
  } finally {
    fs.closeSync(dirFd);
  }
}

function listing(root, opts) {
  const out = new Set();
  walk(root, [], opts, (dirFd, name, rel) => {
    let info;
    try { info = fs.lstatSync(at(dirFd, name)); } catch { return true; }
    if (info.isFile()) out.add(rel);
    return true;
  });
  return out;
}

/** Every line of a side as a hunk's lines, with git's marker when it ends without a newline. */
function wholeLines(text, sign) {
  if (text === "") return [];
  const lines = text.split("\\n");
  const ended = lines[lines.length - 1] === "";
  if (ended) lines.pop();
  const out = lines.map((l) => sign + l);
  if (!ended) out.push("\\\\ No newline at end of file");
  return out;
}

function diff(job) {
  const { structuredPatch } = require(job.diffModule);
  const opts = { skipDirs: job.skipDirs, maxDepth: job.maxDepth, maxFiles: job.maxFiles };
  const before = listing(job.base, opts);
  const after = listing(job.tree, opts);
  const paths = [...new Set([...before, ...after])].sort();
  const parts = [];
  const skipped = [];
  let filesChanged = 0, insertions = 0, deletions = 0, bytes = 0;
  for (const path of paths) {
    const a = before.has(path) ? side(job.base, path, job.maxFileBytes, null) : undefined;
    const b = after.has(path) ? side(job.tree, path, job.maxFileBytes, job.owner) : undefined;
    if (a && b && a.bytes && b.bytes && a.bytes.equals(b.bytes)) continue;
    if (a && b && a.hash && a.hash === b.hash) continue;
    const reason = (a && a.skip) || (b && b.skip);
    if (reason) {
      skipped.push({ path, reason });
      continue;
    }
    const isBinary = (f) => f && f.bytes.subarray(0, job.sniffBytes).includes(0);
    if (isBinary(a) || isBinary(b)) {
      skipped.push({ path, reason: "binary" });
      continue;
    }
    const oldText = a ? a.bytes.toString("utf8") : "";
    const newText = b ? b.bytes.toString("utf8") : "";
    let hunks;
    const patch = structuredPatch("a/" + path, "b/" + path, oldText, newText, "", "", {
      context: 3,
      maxEditLength: job.maxEditLength,
      timeout: job.fileTimeoutMs,
    });
    if (patch) {
      if (patch.hunks.length === 0 && a && b) continue;
      hunks = patch.hunks.map((h) => ({ ...h }));
    } else {
      // Past the edit length or the time: the whole file replaced, linear in its size.
      const lines = [...wholeLines(oldText, "-"), ...wholeLines(newText, "+")];
      const count = (t) => wholeLines(t, " ").filter((l) => !l.startsWith("\\\\")).length;
      hunks = [{ oldStart: 1, oldLines: count(oldText), newStart: 1, newLines: count(newText), lines }];
    }
    const header = ["diff --git a/" + path + " b/" + path];
    if (!a) header.push("new file mode 100644", "--- /dev/null", "+++ b/" + path);
    else if (!b) header.push("deleted file mode 100644", "--- a/" + path, "+++ /dev/null");
    else header.push("--- a/" + path, "+++ b/" + path);
    let added = 0, removed = 0;
    const text = hunks.map((h) => {
      for (const line of h.lines) {
        if (line.startsWith("+")) added++;
        else if (line.startsWith("-")) removed++;
      }
      // An empty side starts at line 0, as diff and git write it.
      const range = (start, n) => (n === 0 ? start - (start > 0 ? 1 : 0) : start) + "," + n;
      return ["@@ -" + range(h.oldStart, h.oldLines) + " +" + range(h.newStart, h.newLines) + " @@", ...h.lines].join("\\n");
    });
    const piece = [...header, ...text].join("\\n") + "\\n";
    if (bytes + piece.length > job.maxDiffBytes) {
      skipped.push({ path, reason: "diff_budget" });
      continue;
    }
    bytes += piece.length;
    parts.push(piece);
    filesChanged++;
    insertions += added;
    deletions += removed;
  }
  return { diff: parts.join(""), filesChanged, insertions, deletions, skipped };
}

const KINDS = { grep, diff };
parentPort.on("message", (job) => {
  try {
    parentPort.postMessage({ ok: true, result: KINDS[job.kind](job) });
  } catch (err) {
    parentPort.postMessage({ ok: false, message: String((err && err.message) || err) });
  }
});
`;
