// Tokens and TLS files refused before any call, each problem named (no cluster).
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { ControllerClient, tokenProblem, tlsFromDir, retryable, status } = require("..");

test("tokens that can be sent", () => {
  assert.strictEqual(tokenProblem("sf_abc-DEF.123~+/"), null);
  assert.strictEqual(tokenProblem("abc=="), null);
});

test("tokens that cannot are named", () => {
  assert.strictEqual(tokenProblem(""), "the token is empty");
  assert.strictEqual(tokenProblem("abc\u00e9"),
    "the token holds U+00E9 at character 4; a token is printable ASCII");
  assert.match(tokenProblem("a=b"), /cannot have/);
  assert.strictEqual(tokenProblem("=="), "the token is padding only");
  assert.throws(() => new ControllerClient("127.0.0.1:1", { token: "bad token" }),
    /^Error: servefleet: the token holds U\+0020 at character 4/);
  assert.throws(() => ControllerClient.fromEnv({}, { SERVEFLEET_TOKEN: "a\nb" }),
    /SERVEFLEET_TOKEN: the token holds U\+000A/);
});

test("TLS files: a missing one and one without PEM are named", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "servefleet-node-"));
  assert.throws(() => tlsFromDir(dir, "admin"), new RegExp(`cluster CA ${path.join(dir, "ca.crt")}: no such file`));
  for (const name of ["ca.crt", "admin.crt", "admin.key"]) fs.writeFileSync(path.join(dir, name), "not PEM\n");
  assert.throws(() => tlsFromDir(dir, "admin"), /cluster CA .*ca\.crt: no PEM certificate in it/);
  assert.throws(() => ControllerClient.fromEnv({}, { SERVEFLEET_CLUSTER_CA: "ca.crt" }),
    /mutual TLS needs all of SERVEFLEET_CLUSTER_CA/);
  fs.rmSync(dir, { recursive: true });
});

test("which failures go to the next controller", () => {
  assert.ok(retryable({ code: status.UNAVAILABLE }));
  assert.ok(retryable({ code: status.DEADLINE_EXCEEDED }));
  assert.ok(!retryable({ code: status.INVALID_ARGUMENT }));
  assert.ok(!retryable({ code: status.PERMISSION_DENIED }));
});

test("a controller that is not there: UNAVAILABLE after the timeout, naming it", async () => {
  const client = new ControllerClient("127.0.0.1:1", { timeoutMs: 300 });
  await assert.rejects(client.status(), (err) => err.code === status.UNAVAILABLE
    && /no controller leader reachable at 127\.0\.0\.1:1 within 300 ms/.test(err.details));
  client.close();
});
