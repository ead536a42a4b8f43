// The Node client against a real cluster that tests/test_clients.py starts:
// two controllers on etcd (SERVEFLEET_CONTROLLER), a proxy
// (SERVEFLEET_TEST_PROXY), the controllers' pids by address
// (SERVEFLEET_TEST_PIDS) and the folder of the test apps (SERVEFLEET_TEST_APPS).
// The scenario every client runs: deploy an application, wait until RUNNING,
// call it through the proxy, survive the leader's SIGKILL, delete it.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { ControllerClient, ControllerError } = require("..");

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run through tests/test_clients.py`);
  return value;
};

async function waitFor(what, check, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await check();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const running = (status, name) => status.applications.some(
  (a) => a.name === name && a.status === "APPLICATION_STATUS_RUNNING");

test("deploy, call, fail over, delete", async () => {
  const client = new ControllerClient(env("SERVEFLEET_CONTROLLER"), { timeoutMs: 30000 });
  const proxy = env("SERVEFLEET_TEST_PROXY");
  const pids = JSON.parse(env("SERVEFLEET_TEST_PIDS"));
  try {
    await client.deployApplications([{
      name: "node", routePrefix: "/node", importPath: "graph_app:hello",
      runtime: { workingDir: env("SERVEFLEET_TEST_APPS") },
    }]);
    await waitFor("node RUNNING", async () => running(await client.status(), "node"));

    // The route reaches the proxy over Watch; then the call goes through it.
    const routes = [];
    const watch = await client.watch(["routes"], (s) => routes.push(s));
    await waitFor("the route over Watch",
      () => routes.some((s) => s.routes && s.routes.routes.some((r) => r.routePrefix === "/node")));
    watch.cancel();
    const answer = await waitFor("an answer through the proxy", async () => {
      const reply = await fetch(`${proxy}/node`).catch(() => null);
      return reply && reply.status === 200 ? reply.text() : null;
    });
    assert.strictEqual(answer, "hello");

    // The leader dies; the next call finds the new one.
    const { leader } = await client.status();
    process.kill(pids[leader], "SIGKILL");
    const after = await client.status();
    assert.notStrictEqual(after.leader, leader);
    assert.ok(running(after, "node"));

    // Errors come back with their code and the field at fault.
    await assert.rejects(client.deploy({ name: "bad name!", importPath: "m:a" }),
      (err) => err instanceof ControllerError && err.details.includes("spec.name"));

    const deleted = await client.deleteApplications(["node"]);
    assert.deepStrictEqual(deleted.deleted, ["node"]);
  } finally {
    client.close();
  }
});
