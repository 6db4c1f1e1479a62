// SPDX-License-Identifier: LGPL-2.1-or-later
//
// End-to-end check of draftboxd with the official OpenSandbox TypeScript SDK
// (@alibaba-group/opensandbox, IsolatedSessionsAdapter from its "internal"
// entry), used unchanged. tests/integration/test_sdk_e2e.py starts a real
// draftboxd and runs this script with:
//   DRAFTBOX_URL        base URL of the server (no /v1)
//   DRAFTBOX_TOKEN      access token ("" when auth is off)
//   DRAFTBOX_WORKSPACE  absolute path of a workspace holding hello.txt = "original\n"
// It prints one line per step and exits non-zero on the first failure.
// Diff and commit have no SDK method (the OpenAPI spec leaves them open), so
// they are called with fetch and the same headers the SDK gets.

import { readFileSync, existsSync } from "node:fs";
import { IsolatedSessionsAdapter } from "@alibaba-group/opensandbox/internal";

const baseUrl = process.env.DRAFTBOX_URL;
const token = process.env.DRAFTBOX_TOKEN ?? "";
const ws = process.env.DRAFTBOX_WORKSPACE;
if (!baseUrl || !ws) {
  console.error("e2e: DRAFTBOX_URL and DRAFTBOX_WORKSPACE are required");
  process.exit(2);
}
const headers = token ? { "OpenSandbox-Execd-Token": token } : {};

let step = 0;
function check(cond, what, detail) {
  step++;
  if (!cond) {
    console.error(`not ok ${step} - ${what}${detail !== undefined ? `: ${typeof detail === "string" ? detail : JSON.stringify(detail)}` : ""}`);
    throw new Error(`e2e failed at: ${what}`);
  }
  console.log(`ok ${step} - ${what}`);
}

// execd sends one event per output line, without its "\n"; tolerate servers that keep it.
function linesOf(messages) {
  return messages.map((m) => m.text.replace(/\n$/, ""));
}

function stdoutOf(execution) {
  return linesOf(execution.logs.stdout).join("\n");
}

function stderrOf(execution) {
  return linesOf(execution.logs.stderr).join("\n");
}

async function raw(method, path, body) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...headers, accept: "application/json", ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

const adapter = new IsolatedSessionsAdapter({ baseUrl, headers });
let session;

try {
  const caps = await adapter.capabilities();
  check(caps.available === true, "capabilities: isolation available", caps);
  check(caps.diff_supported === true && caps.commit_supported === true, "capabilities: diff and commit supported", caps);

  session = await adapter.create({ workspace: { path: ws, mode: "overlay" }, profile: "strict" });
  check(typeof session.sessionId === "string" && session.sessionId.length > 0, "create session", session.info);
  check(!Number.isNaN(new Date(session.info.created_at).getTime()), "created_at is a date", session.info.created_at);

  const state = await session.get();
  check(state.status === "active", "session state is active", state);

  const listed = await adapter.list();
  check(listed.some((s) => s.session_id === session.sessionId), "session listed", listed);

  // A command that edits files, writes to both streams and keeps going.
  const out = [];
  const exec = await session.run(
    `cd '${ws}' && printf 'changed\\n' > hello.txt && printf 'new\\n' > added.txt && echo to-stdout && echo to-stderr >&2`,
    undefined,
    { onStdout: (m) => out.push(m.text) },
  );
  check(exec.exitCode === 0, "run exits 0", { exitCode: exec.exitCode, error: exec.error, stderr: stderrOf(exec) });
  check(linesOf(exec.logs.stdout).includes("to-stdout"), "run stdout streamed", exec.logs);
  check(out.some((t) => t.startsWith("to-stdout")), "onStdout handler called", out);
  // execd's isolated run reports stderr through the same stream; either event type is fine
  check(`${stdoutOf(exec)}\n${stderrOf(exec)}`.includes("to-stderr"), "run stderr delivered", exec.logs);

  const failing = await session.run("exit 3");
  check(failing.exitCode === 3, "exit status of a failing command", { exitCode: failing.exitCode, error: failing.error });

  // The host workspace is untouched until commit.
  check(readFileSync(`${ws}/hello.txt`, "utf8") === "original\n", "workspace unchanged before commit");
  check(!existsSync(`${ws}/added.txt`), "new file not in the workspace before commit");

  // Files API on the session's view.
  const text = await session.files.readFile(`${ws}/hello.txt`);
  check(text === "changed\n", "readFile sees the sandbox's edit", text);
  const info = await session.files.getFileInfo([`${ws}/hello.txt`]);
  const hi = info[`${ws}/hello.txt`];
  check(hi && hi.size === 8 && hi.modifiedAt instanceof Date && !Number.isNaN(hi.modifiedAt.getTime()), "getFileInfo", hi);
  check(hi.mode === 644, "mode is octal digits (644)", hi.mode);

  await session.files.writeFiles([{ path: `${ws}/sub/uploaded.txt`, data: "uploaded by the sdk\n", mode: 640 }]);
  const cat = await session.run(`cat '${ws}/sub/uploaded.txt' && stat -c %a '${ws}/sub/uploaded.txt'`);
  check(linesOf(cat.logs.stdout).join("|") === "uploaded by the sdk|640", "sandbox sees the upload with its mode", cat.logs);

  const partial = await session.files.readFile(`${ws}/sub/uploaded.txt`, { range: "bytes=0-7" });
  check(partial === "uploaded", "ranged download", partial);

  const entries = await session.files.listDirectory({ path: ws, depth: 2 });
  const names = entries.map((e) => e.path).sort();
  check(names.includes(`${ws}/added.txt`) && names.includes(`${ws}/sub/uploaded.txt`), "listDirectory", names);
  check(entries.find((e) => e.path === `${ws}/sub`)?.type === "directory", "listDirectory types", entries);

  const found = await session.files.search({ path: ws, pattern: "*.txt" });
  check(found.map((e) => e.path).sort().join(",") === [`${ws}/added.txt`, `${ws}/hello.txt`, `${ws}/sub/uploaded.txt`].join(","),
    "search *.txt", found.map((e) => e.path));

  const replaced = await session.files.replaceContentsDetailed([{ path: `${ws}/hello.txt`, oldContent: "changed", newContent: "replaced" }]);
  check(replaced.length === 1 && replaced[0].replacedCount === 1, "replaceContentsDetailed", replaced);
  check((await session.files.readFile(`${ws}/hello.txt`)) === "replaced\n", "replace applied");

  await session.files.moveFiles([{ src: `${ws}/added.txt`, dest: `${ws}/moved.txt` }]);
  await session.files.createDirectories([{ path: `${ws}/made/deep`, mode: 755 }]);
  await session.files.setPermissions([{ path: `${ws}/moved.txt`, mode: 600 }]);
  const after = await session.files.getFileInfo([`${ws}/moved.txt`, `${ws}/made/deep`]);
  check(after[`${ws}/moved.txt`].mode === 600 && after[`${ws}/made/deep`].type === "directory", "move, mkdir, chmod", after);
  await session.files.deleteDirectories([`${ws}/made`]);
  await session.files.deleteFiles([`${ws}/sub/uploaded.txt`]);

  // A stateless client that only kept the id reattaches and sees the same view.
  const again = await adapter.attach(session.sessionId);
  check(again.info.workspace?.path === ws, "attach recovers the creation parameters", again.info);
  check((await again.files.readFile(`${ws}/hello.txt`)) === "replaced\n", "attached handle reads the same view");

  // Hostile paths are refused, not followed.
  let refused = false;
  try {
    await session.files.readFile("/etc/passwd");
  } catch (e) {
    refused = e.statusCode >= 400 && e.statusCode < 500;
  }
  check(refused, "a path outside the workspace is refused with 4xx");
  await session.run(`ln -s /etc '${ws}/etc-link'`);
  refused = false;
  try {
    await session.files.readFile(`${ws}/etc-link/passwd`);
  } catch (e) {
    refused = e.statusCode >= 400 && e.statusCode < 500;
  }
  check(refused, "a symlink planted by the sandbox is not followed");
  await session.files.deleteFiles([`${ws}/etc-link`]);

  // Diff (draftbox JSON change list) and commit, with plain fetch.
  const sid = encodeURIComponent(session.sessionId);
  const diff = await raw("GET", `/v1/isolated/session/${sid}/diff`);
  check(diff.status === 200 && Array.isArray(diff.json?.changes), "diff returns a change list", diff.text);
  const byPath = Object.fromEntries(diff.json.changes.map((c) => [String(c.path).replace(/^.*?([^/]*)$/, "$1"), c.status]));
  check(byPath["hello.txt"] === "modified" && byPath["moved.txt"] === "added", "diff lists the edits", diff.json.changes);

  const patch = await fetch(`${baseUrl}/v1/isolated/session/${sid}/diff?format=patch`, { headers });
  const patchText = await patch.text();
  check(patch.status === 200 && patchText.includes("+replaced"), "diff as a patch", patchText);

  const commit = await raw("POST", `/v1/isolated/session/${sid}/commit`, {});
  check(commit.status === 200, "commit", commit.text);
  check(readFileSync(`${ws}/hello.txt`, "utf8") === "replaced\n", "commit wrote the workspace");
  check(readFileSync(`${ws}/moved.txt`, "utf8") === "new\n", "commit added the new file");
  check(!existsSync(`${ws}/etc-link`) && !existsSync(`${ws}/sub/uploaded.txt`), "deleted entries not committed");

  const diff2 = await raw("GET", `/v1/isolated/session/${sid}/diff`);
  check(diff2.status === 200 && diff2.json.changes.length === 0, "diff empty after commit", diff2.text);

  await session.delete();
  const listed2 = await adapter.list();
  check(!listed2.some((s) => s.session_id === session.sessionId && s.status === "active"), "session deleted", listed2);
  session = undefined;
  console.log(`1..${step}`);
} catch (e) {
  console.error(`e2e: ${e?.stack ?? e}`);
  if (e?.rawBody !== undefined) console.error(`e2e: raw body: ${JSON.stringify(e.rawBody)}`);
  if (session) {
    try {
      await session.delete();
    } catch {
      /* best effort */
    }
  }
  process.exit(1);
}
