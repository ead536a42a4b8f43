// A servefleet controller client for Node, from the protos of the repository
// (copied into proto/ when the package is built; their TypeScript types are
// in types/, index.d.ts).
//
//   const { ControllerClient } = require("@servefleet/client");
//   const client = ControllerClient.fromEnv(); // SERVEFLEET_CONTROLLER, _CERTS, _TOKEN
//   await client.deploy({ name: "m", importPath: "model:App" });
//
// As the Python SDK does, every call goes to the leader. A standby answers
// UNAVAILABLE with the leader's address in the trailing metadata key
// `servefleet-leader`; the client goes there. A call that failed UNAVAILABLE
// or DEADLINE_EXCEEDED is tried again on the next controller with backoff
// until `timeoutMs` has passed (every mutating call is idempotent: the same
// spec twice changes nothing, so a retry after an unknown outcome is safe).
"use strict";
const { on } = require("node:events");
const fs = require("node:fs");
const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");
const { tls, tlsFromDir, tokenProblem, optionsFromEnv } = require("./credentials");

const LEADER_KEY = "servefleet-leader";
const DEFAULT_ADDRESS = "127.0.0.1:7373";
const PROTO_ROOT = path.join(__dirname, "proto");
// The options the types in types/ were generated with (scripts/generate.js).
const LOADER_OPTIONS = { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true };

let definitions;
function api() {
  if (!definitions) {
    if (!fs.existsSync(path.join(PROTO_ROOT, "servefleet", "v1", "controller.proto"))) {
      throw new Error(`servefleet: no protos in ${PROTO_ROOT}: run npm install in ${__dirname}`
        + " (its prepare step copies them from the repository)");
    }
    const loaded = loader.loadSync(["servefleet/v1/controller.proto"],
      { includeDirs: [PROTO_ROOT], ...LOADER_OPTIONS });
    definitions = grpc.loadPackageDefinition(loaded).servefleet.v1;
  }
  return definitions;
}

class ControllerError extends Error {
  constructor(code, details, cause) {
    super(`${grpc.status[code] || code}: ${details}`, cause ? { cause } : undefined);
    this.name = "ControllerError";
    this.code = code;
    this.details = details;
  }
}

// Whether a failed call may go to the next controller.
function retryable(err) {
  return err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED;
}

// The answers of a Watch stream, for `for await`; its error as the call's
// status (a Readable's own iterator would say only "aborted"). Leaving the
// loop early cancels the call.
async function* responses(stream) {
  let ended = false;
  try {
    for await (const [response] of on(stream, "data", { close: ["end"] })) yield response;
    ended = true;
  } finally {
    if (!ended) {
      stream.on("error", () => {}); // the CANCELLED that cancel() brings
      stream.cancel();
    }
  }
}

class ControllerClient {
  // addresses: "host:port" strings (or one comma-separated string);
  // options: timeoutMs (a whole call, retries included, default 30000),
  // rpcTimeoutMs (one attempt, default 5000), token (a bearer token),
  // credentials (tls(...) or tlsFromDir(...); plain text without).
  constructor(addresses, options = {}) {
    const list = typeof addresses === "string" ? addresses.split(",") : addresses || [];
    this.addresses = list.map((a) => a.trim()).filter(Boolean);
    if (this.addresses.length === 0) this.addresses = [DEFAULT_ADDRESS];
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
    this.token = options.token || undefined;
    const problem = this.token && tokenProblem(this.token);
    if (problem) throw new Error(`servefleet: ${problem}`);
    this.credentials = options.credentials || grpc.credentials.createInsecure();
    this.current = 0;
    this.stubs = new Map();
  }

  // A client configured as the servefleet command is, from the environment
  // (SERVEFLEET_CONTROLLER, SERVEFLEET_CERTS or SERVEFLEET_CLUSTER_CA/_CERT/_KEY,
  // SERVEFLEET_TOKEN); `options` add to or override what it says.
  static fromEnv(options = {}, env = process.env) {
    return new ControllerClient(env.SERVEFLEET_CONTROLLER || DEFAULT_ADDRESS,
      { ...optionsFromEnv(env), ...options });
  }

  stub(address) {
    if (!this.stubs.has(address)) {
      this.stubs.set(address, new (api().ControllerService)(address, this.credentials,
        { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 2000 }));
    }
    return this.stubs.get(address);
  }

  metadata() {
    const m = new grpc.Metadata();
    if (this.token) m.set("authorization", `Bearer ${this.token}`);
    return m;
  }

  // Calls the unary `method` (as named in controller.proto) on the leader.
  async call(method, request = {}) {
    const deadline = Date.now() + this.timeoutMs;
    let attempt = 0;
    for (;;) {
      const address = this.addresses[this.current];
      const rpcDeadline = new Date(Math.min(deadline, Date.now() + this.rpcTimeoutMs));
      try {
        return await new Promise((resolve, reject) => {
          this.stub(address)[method](request, this.metadata(), { deadline: rpcDeadline },
            (err, reply) => (err ? reject(err) : resolve(reply)));
        });
      } catch (err) {
        if (!retryable(err)) throw new ControllerError(err.code, err.details, err);
        if (Date.now() >= deadline) {
          throw new ControllerError(grpc.status.UNAVAILABLE,
            `no controller leader reachable at ${this.addresses.join(", ")} within `
            + `${this.timeoutMs} ms (last error: ${address}: ${err.details})`, err);
        }
        this.follow(address, err.metadata && err.metadata.get(LEADER_KEY)[0]);
        attempt += 1;
        const backoff = Math.min(1000, 50 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2);
        await new Promise((r) => setTimeout(r, Math.min(backoff, Math.max(0, deadline - Date.now()))));
      }
    }
  }

  follow(address, hint) {
    if (hint && hint !== address) {
      if (!this.addresses.includes(hint)) this.addresses.push(hint);
      this.current = this.addresses.indexOf(hint);
    } else {
      this.current = (this.current + 1) % this.addresses.length;
    }
  }

  deploy(spec) { return this.call("Deploy", { spec }); }

  deployApplications(applications, extra = {}) {
    return this.call("DeployApplications", { applications, ...extra });
  }

  deleteApplications(names) { return this.call("DeleteApplications", { names }); }

  status() { return this.call("GetStatus", {}); }

  // A Watch stream on the leader for `keys` ("routes",
  // "replicas/<app>/<deployment>", ...): a Readable of WatchResponse
  // (`for await`), its `address` the controller it is open on; the first
  // answer of each key is its snapshot. cancel() ends it. When that
  // controller stops, the stream fails UNAVAILABLE: watch again.
  async watch(keys) {
    const { leader } = await this.status(); // settles on the leader
    const address = leader || this.addresses[this.current];
    const known = Object.fromEntries(keys.map((k) => [k, ""]));
    const stream = this.stub(address).Watch({ known, kind: "WATCHER_KIND_HANDLE" }, this.metadata());
    stream.address = address;
    stream[Symbol.asyncIterator] = () => responses(stream);
    return stream;
  }

  close() {
    for (const stub of this.stubs.values()) stub.close();
    this.stubs.clear();
  }
}

module.exports = {
  ControllerClient, ControllerError, LEADER_KEY, DEFAULT_ADDRESS, retryable, tls, tlsFromDir,
  tokenProblem, status: grpc.status,
};
