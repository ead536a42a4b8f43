// The Node client against the real clusters that tests/test_clients.py starts
// and names in the environment (without it these tests skip): two
// controllers on etcd with the process runtime and a proxy
// (SERVEFLEET_CONTROLLER, SERVEFLEET_TEST_PROXY, SERVEFLEET_TEST_PIDS: the
// controllers' pids by address, SERVEFLEET_TEST_APPS); two with mutual TLS
// and tokens (SERVEFLEET_TEST_TLS_*). The leader is SIGKILLed under open
// Watch streams in each.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const path = require("node:path");
const { ControllerClient, ControllerError, retryable, status: codes, tlsFromDir } = require("..");
const { Program } = require("./program");

const missing = (names) => {
  const absent = names.filter((n) => !process.env[n]);
  return absent.length ? `${absent.join(", ")} not set: tests/test_clients.py sets them` : false;
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

// Reads the answers (one iterator of a Watch stream: leaving a `for await`
// early would cancel the call) until a snapshot of the routes has `prefix`.
async function routeSeen(responses, prefix) {
  for (;;) {
    const { value, done } = await responses.next();
    if (done) throw new Error(`the stream ended before ${prefix} was routed`);
    if ((value.snapshot?.routes?.routes ?? []).some((r) => r.routePrefix === prefix)) return;
  }
}

// SIGKILLs the leader (its pid in the JSON of the variable `pids`) under the
// open stream, which must then fail in a way the client retries.
async function killLeader(client, stream, responses, pids) {
  const { leader } = await client.status();
  assert.strictEqual(stream.address, leader, "the stream is open on the leader");
  process.kill(JSON.parse(process.env[pids])[leader], "SIGKILL");
  await assert.rejects(routeSeen(responses, "/never"), (err) => retryable(err));
  return leader;
}

test("the docs' program through a failover", {
  skip: missing(["SERVEFLEET_CONTROLLER", "SERVEFLEET_TEST_PROXY", "SERVEFLEET_TEST_PIDS",
    "SERVEFLEET_TEST_APPS"]),
}, async () => {
  const env = { ...process.env };
  for (const name of ["SERVEFLEET_CERTS", "SERVEFLEET_TOKEN", "SERVEFLEET_CLUSTER_CA",
    "SERVEFLEET_CLUSTER_CERT", "SERVEFLEET_CLUSTER_KEY"]) delete env[name];
  const fleet = new Program(path.join(__dirname, "..", "examples", "fleet.js"), ["--name", "fleet",
    "--import", "graph_app:hello", "--dir", env.SERVEFLEET_TEST_APPS, "--route", "/fleet"], env);
  const client = new ControllerClient(env.SERVEFLEET_CONTROLLER);
  try {
    await fleet.until(/^ {2}fleet: APPLICATION_STATUS_RUNNING$/);
    const [, first] = await fleet.until(/^watching routes on (\S+)$/);
    await fleet.until(/^ {2}route \/fleet -> fleet\//);
    const answer = await waitFor("an answer through the proxy", async () => {
      const reply = await fetch(`${env.SERVEFLEET_TEST_PROXY}/fleet`).catch(() => null);
      return reply && reply.status === 200 ? reply.text() : null;
    });
    assert.strictEqual(answer, "hello");

    // The leader dies under both streams; the next call and new streams find the new one.
    const stream = await client.watch(["routes"]);
    const responses = stream[Symbol.asyncIterator]();
    await routeSeen(responses, "/fleet");
    assert.strictEqual(stream.address, first);
    const old = await killLeader(client, stream, responses, "SERVEFLEET_TEST_PIDS");
    const after = await client.status();
    assert.notStrictEqual(after.leader, old);
    assert.ok(running(after, "fleet"));
    await fleet.until(/^watch stream ended \(UNAVAILABLE\); opening it on the leader$/);
    const [, second] = await fleet.until(/^watching routes on (\S+)$/);
    assert.strictEqual(second, after.leader);
    await fleet.until(/^ {2}route \/fleet -> fleet\//);
    const again = await client.watch(["routes"]);
    assert.strictEqual(again.address, after.leader);
    for await (const response of again) { // leaving the loop cancels the call
      if ((response.snapshot?.routes?.routes ?? []).some((r) => r.routePrefix === "/fleet")) break;
    }

    // Errors come back with their code and the field at fault.
    await assert.rejects(client.deploy({ name: "bad name!", importPath: "m:a" }),
      (err) => err instanceof ControllerError && err.code === codes.INVALID_ARGUMENT
        && err.details.includes("spec.name"));

    fleet.kill("SIGINT");
    await fleet.until(/^deleted fleet$/);
    assert.strictEqual(await fleet.exited, 0, fleet.seen.join("\n"));
    assert.ok(!(await client.status()).applications.some((a) => a.name === "fleet"));
  } finally {
    fleet.kill("SIGKILL");
    client.close();
  }
});

test("TLS and tokens", {
  skip: missing(["SERVEFLEET_TEST_TLS_CONTROLLER", "SERVEFLEET_TEST_TLS_PIDS", "SERVEFLEET_TEST_CERTS",
    "SERVEFLEET_TEST_DEPLOYER_TOKEN", "SERVEFLEET_TEST_READER_TOKEN"]),
}, async () => {
  const addresses = process.env.SERVEFLEET_TEST_TLS_CONTROLLER;
  const certs = process.env.SERVEFLEET_TEST_CERTS;
  const connect = (role, token, timeoutMs = 30000) => new ControllerClient(addresses,
    { token, timeoutMs, credentials: role ? tlsFromDir(certs, role) : undefined });
  const clients = [];
  const open = (...args) => { clients.push(connect(...args)); return clients.at(-1); };
  try {
    await assert.rejects(open("", process.env.SERVEFLEET_TEST_DEPLOYER_TOKEN, 2000).status(),
      (err) => err.code === codes.UNAVAILABLE, "plain text to a TLS controller");
    await assert.rejects(open("client", undefined, 10000).status(),
      (err) => err.code === codes.UNAUTHENTICATED && /send a token/.test(err.details));
    const reader = open("client", process.env.SERVEFLEET_TEST_READER_TOKEN);
    await reader.status();
    // A deployment on its own: a controller without a runtime builds no application.
    const spec = { name: "secure", importPath: "graph_app:hello", routePrefix: "/secure" };
    await assert.rejects(reader.deploy(spec), (err) => err.code === codes.PERMISSION_DENIED);

    const deployer = open("client", process.env.SERVEFLEET_TEST_DEPLOYER_TOKEN);
    await deployer.deploy(spec);
    const stream = await deployer.watch(["routes"]);
    const responses = stream[Symbol.asyncIterator]();
    await routeSeen(responses, "/secure");
    const old = await killLeader(deployer, stream, responses, "SERVEFLEET_TEST_TLS_PIDS");
    assert.notStrictEqual((await deployer.status()).leader, old);
    // Any unary method through call, with the same credentials and leader following.
    const { deleted } = await deployer.call("DeleteDeployments", { names: ["secure"] });
    assert.deepStrictEqual(deleted, ["secure"]);
  } finally {
    for (const client of clients) client.close();
  }
});
