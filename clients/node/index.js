// A servefleet controller client for Node, from the shared protos (proto/).
//
//   const { ControllerClient } = require("@servefleet/client");
//   const client = new ControllerClient(["127.0.0.1:7373", "127.0.0.1:7374"]);
//   await client.deploy({ name: "m", importPath: "model:App" });
//
// Like the Python SDK (servefleet/client.py): every call goes to the leader.
// A standby answers UNAVAILABLE with the leader's address in the trailing
// metadata key `servefleet-leader`; the client goes there. A call that failed
// UNAVAILABLE or DEADLINE_EXCEEDED is tried again on the next controller with
// backoff until `timeoutMs` has passed (Deploy is idempotent: the same spec
// twice changes nothing, so a retry after an unknown outcome is safe).
"use strict";
const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const LEADER_KEY = "servefleet-leader";
const RETRYABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED]);
// The protos: proto/ of the repository, or PROTO_ROOT when installed elsewhere.
const PROTO_ROOT = process.env.SERVEFLEET_PROTO_ROOT
  || path.resolve(__dirname, "..", "..", "proto");

let definitions;
function api() {
  if (!definitions) {
    const loaded = loader.loadSync(["servefleet/v1/controller.proto"], {
      includeDirs: [PROTO_ROOT], keepCase: false, longs: Number, enums: String,
      defaults: true, oneofs: true,
    });
    definitions = grpc.loadPackageDefinition(loaded).servefleet.v1;
  }
  return definitions;
}

class ControllerError extends Error {
  constructor(code, details) {
    super(`${grpc.status[code] || code}: ${details}`);
    this.code = code;
    this.details = details;
  }
}

class ControllerClient {
  // addresses: "host:port" strings (or one comma-separated string);
  // options: timeoutMs (the whole call, retries included, default 30000),
  // rpcTimeoutMs (one attempt, default 5000), token (a bearer token).
  constructor(addresses, options = {}) {
    const list = typeof addresses === "string" ? addresses.split(",") : addresses || [];
    this.addresses = list.map((a) => a.trim()).filter(Boolean);
    if (this.addresses.length === 0) {
      this.addresses = (process.env.SERVEFLEET_CONTROLLER || "127.0.0.1:7373").split(",");
    }
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
    this.token = options.token ?? process.env.SERVEFLEET_TOKEN;
    this.current = 0;
    this.stubs = new Map();
  }

  stub(address) {
    if (!this.stubs.has(address)) {
      this.stubs.set(address, new (api().ControllerService)(
        address, grpc.credentials.createInsecure(),
        { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 2000 }));
    }
    return this.stubs.get(address);
  }

  metadata() {
    const m = new grpc.Metadata();
    if (this.token) m.set("authorization", `Bearer ${this.token}`);
    return m;
  }

  // Call `method` (as named in controller.proto) on the leader.
  async call(method, request = {}) {
    const deadline = Date.now() + this.timeoutMs;
    let attempt = 0;
    let lastError = "no attempt made";
    for (;;) {
      const address = this.addresses[this.current];
      const rpcDeadline = new Date(Math.min(deadline, Date.now() + this.rpcTimeoutMs));
      try {
        return await new Promise((resolve, reject) => {
          this.stub(address)[method](request, this.metadata(), { deadline: rpcDeadline },
            (err, reply) => (err ? reject(err) : resolve(reply)));
        });
      } catch (err) {
        if (!RETRYABLE.has(err.code)) throw new ControllerError(err.code, err.details);
        lastError = `${address}: ${err.details}`;
        const hint = err.metadata && err.metadata.get(LEADER_KEY)[0];
        if (Date.now() >= deadline) {
          throw new ControllerError(grpc.status.UNAVAILABLE,
            `no controller leader reachable at ${this.addresses.join(", ")} within `
            + `${this.timeoutMs} ms (last error: ${lastError})`);
        }
        if (hint && hint !== address) {
          if (!this.addresses.includes(hint)) this.addresses.push(hint);
          this.current = this.addresses.indexOf(hint);
        } else {
          this.current = (this.current + 1) % this.addresses.length;
        }
        attempt += 1;
        const backoff = Math.min(1000, 50 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2);
        await new Promise((r) => setTimeout(r, Math.min(backoff, Math.max(0, deadline - Date.now()))));
      }
    }
  }

  deploy(spec) { return this.call("Deploy", { spec }); }

  deployApplications(applications, extra = {}) {
    return this.call("DeployApplications", { applications, ...extra });
  }

  deleteApplications(names) { return this.call("DeleteApplications", { names }); }

  status() { return this.call("GetStatus", {}); }

  // Watch `keys` ("routes", "replicas/<app>/<deployment>", ...) on the leader;
  // calls onSnapshot(snapshot) for each; returns the call (cancel() ends it).
  async watch(keys, onSnapshot, onError = () => {}) {
    const status = await this.status(); // settles on the leader
    const leader = status.leader || this.addresses[this.current];
    const known = Object.fromEntries(keys.map((k) => [k, ""]));
    const call = this.stub(leader).Watch({ known, kind: "WATCHER_KIND_HANDLE" }, this.metadata());
    call.on("data", (response) => { if (response.snapshot) onSnapshot(response.snapshot); });
    call.on("error", (err) => { if (err.code !== grpc.status.CANCELLED) onError(err); });
    return call;
  }

  close() {
    for (const stub of this.stubs.values()) stub.close();
    this.stubs.clear();
  }
}

module.exports = { ControllerClient, ControllerError, LEADER_KEY };
