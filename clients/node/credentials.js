// How the client reaches the controllers: plain text, or the cluster's
// mutual TLS from PEM files; and the check on a bearer token before it is sent.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const grpc = require("@grpc/grpc-js");

// Reads `file`, which must hold a PEM block whose label ends with `label`.
function pem(what, file, label) {
  let text;
  try {
    text = fs.readFileSync(file);
  } catch (err) {
    throw new Error(`servefleet: ${what} ${file}: ${err.code === "ENOENT" ? "no such file" : err.message}`);
  }
  if (!new RegExp(`-----BEGIN [A-Z ]*${label}-----`).test(text.toString("latin1"))) {
    throw new Error(`servefleet: ${what} ${file}: no PEM ${label.toLowerCase()} in it`);
  }
  return text;
}

// The client side of the cluster's mutual TLS: the cluster's CA certificate
// (the controllers' must chain to it), this client's certificate and its key.
// The server name checked is the address's host (`servefleet certs init`
// names localhost, 127.0.0.1 and ::1, and each --host). An error names the file.
function tls(caFile, certFile, keyFile) {
  return grpc.credentials.createSsl(pem("cluster CA", caFile, "CERTIFICATE"),
    pem("key", keyFile, "PRIVATE KEY"), pem("client certificate", certFile, "CERTIFICATE"));
}

// tls() of a `servefleet certs init` directory: DIR/ca.crt, DIR/<role>.crt,
// DIR/<role>.key (the command line's role is "admin").
function tlsFromDir(dir, role) {
  return tls(path.join(dir, "ca.crt"), path.join(dir, `${role}.crt`), path.join(dir, `${role}.key`));
}

// Why `token` cannot be sent as a bearer token (RFC 6750's b64token: letters,
// digits and -._~+/, then = padding), or null when it can. gRPC would refuse
// such metadata with a bare INTERNAL; the controller reads the same rule.
function tokenProblem(token) {
  if (!token) return "the token is empty";
  let padding = false;
  for (let i = 0; i < token.length; i += 1) {
    const c = token.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f) {
      const code = c.toString(16).toUpperCase().padStart(4, "0");
      return `the token holds U+${code} at character ${i + 1}; a token is printable ASCII`;
    }
    if (token[i] === "=") {
      padding = true;
    } else if (padding || !/[A-Za-z0-9\-._~+/]/.test(token[i])) {
      return "the token holds characters a bearer token cannot have (letters, digits and"
        + " -._~+/ then = padding only)";
    }
  }
  return token[0] === "=" ? "the token is padding only" : null;
}

// The options the servefleet command reads from the environment: addresses
// from SERVEFLEET_CONTROLLER, mutual TLS from SERVEFLEET_CERTS (DIR/admin.crt)
// or SERVEFLEET_CLUSTER_CA, _CERT and _KEY, the token from SERVEFLEET_TOKEN.
function optionsFromEnv(env = process.env) {
  const options = {};
  if (env.SERVEFLEET_TOKEN) {
    const problem = tokenProblem(env.SERVEFLEET_TOKEN);
    if (problem) throw new Error(`servefleet: SERVEFLEET_TOKEN: ${problem}`);
    options.token = env.SERVEFLEET_TOKEN;
  }
  const files = [env.SERVEFLEET_CLUSTER_CA, env.SERVEFLEET_CLUSTER_CERT, env.SERVEFLEET_CLUSTER_KEY];
  if (env.SERVEFLEET_CERTS) {
    options.credentials = tlsFromDir(env.SERVEFLEET_CERTS, "admin");
  } else if (files.every(Boolean)) {
    options.credentials = tls(...files);
  } else if (files.some(Boolean)) {
    throw new Error("servefleet: mutual TLS needs all of SERVEFLEET_CLUSTER_CA,"
      + " SERVEFLEET_CLUSTER_CERT and SERVEFLEET_CLUSTER_KEY (or SERVEFLEET_CERTS)");
  }
  return options;
}

module.exports = { tls, tlsFromDir, tokenProblem, optionsFromEnv };
