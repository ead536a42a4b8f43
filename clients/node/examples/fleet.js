// fleet deploys an application to a servefleet cluster, waits until it runs,
// prints the cluster's status, then follows the routing table on a Watch
// stream, across leader failovers, until Ctrl-C; then deletes it.
//
//   node fleet.js --import graph_app:hello --dir /srv/apps --route /hello
"use strict";
const { parseArgs } = require("node:util");
const { setTimeout: sleep } = require("node:timers/promises");
const { ControllerClient, retryable, status: codes } = require("@servefleet/client");

async function main() {
  const { values: flags } = parseArgs({
    options: {
      name: { type: "string", default: "hello" }, // the application's name
      import: { type: "string" }, // its code, module:attribute (required)
      dir: { type: "string", default: "" }, // its working directory, on the controller's machine
      route: { type: "string", default: "/hello" }, // its route prefix
      keep: { type: "boolean", default: false }, // leave it deployed on exit
    },
  });
  if (!flags.import) throw new Error("--import is required: the application's module:attribute");

  // Controllers, TLS files and token from SERVEFLEET_CONTROLLER,
  // SERVEFLEET_CERTS and SERVEFLEET_TOKEN, as the servefleet command reads them.
  const client = ControllerClient.fromEnv();
  let stream = null;
  let stopping = false;
  // 4. On Ctrl-C (or SIGTERM), delete it, unless --keep.
  const stop = async () => {
    stopping = true;
    if (stream) stream.cancel();
    if (!flags.keep) {
      await client.deleteApplications([flags.name]);
      console.log(`deleted ${flags.name}`);
    }
    client.close();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);

  // 1. Deploy. Idempotent: the client retries it on the next controller when
  // a leader dies under the call. INVALID_ARGUMENT names the field at fault.
  await client.deployApplications([{
    name: flags.name, importPath: flags.import, routePrefix: flags.route,
    runtime: { workingDir: flags.dir },
  }]);

  // 2. Status, until the application runs.
  for (;;) {
    const reply = await client.status();
    const app = reply.applications.find((a) => a.name === flags.name);
    if (app && app.status === "APPLICATION_STATUS_RUNNING") {
      console.log(`cluster ${reply.cluster}, leader ${reply.leader}, controllers ${reply.controllers}`);
      for (const a of reply.applications) console.log(`  ${a.name}: ${a.status}`);
      break;
    }
    await sleep(500);
  }

  // 3. Watch the routes. A stream ends when its controller dies or steps
  // down; watch again opens it on the new leader.
  while (!stopping) {
    try {
      stream = await client.watch(["routes"]);
      console.log(`watching routes on ${stream.address}`);
      for await (const response of stream) {
        for (const r of response.snapshot?.routes?.routes ?? []) {
          console.log(`  route ${r.routePrefix} -> ${r.application}/${r.deployment}`);
        }
      }
    } catch (err) {
      if (stopping) break;
      if (!retryable(err)) throw err;
      console.log(`watch stream ended (${codes[err.code]}); opening it on the leader`);
    }
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
