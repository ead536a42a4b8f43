// Calls the classifier example through a servefleet proxy's gRPC port from
// Node, with stubs made at run time from the example's .proto.
//
//   node classifier_client.js HOST:PORT APPLICATION PROTO
//
// Prints "predict <label> <replica>", "stream <words>", then the status of a
// call to an application that does not exist ("missing NOT_FOUND").
"use strict";
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const [target, application, proto] = process.argv.slice(2);
const definition = loader.loadSync(proto, { keepCase: true });
const { Classifier } = grpc.loadPackageDefinition(definition).classifier.v1;
const stub = new Classifier(target, grpc.credentials.createInsecure());

function metadata(app) {
  const m = new grpc.Metadata();
  m.set("application", app);
  return m;
}

function deadline() {
  return { deadline: Date.now() + 10000 };
}

function predict(app) {
  return new Promise((resolve, reject) => {
    stub.Predict({ text: "what a great day" }, metadata(app), deadline(),
      (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

function stream(app) {
  return new Promise((resolve, reject) => {
    const words = [];
    const call = stub.PredictStream({ text: "a b c" }, metadata(app), deadline());
    call.on("data", (reply) => words.push(reply.word));
    call.on("error", reject);
    call.on("end", () => resolve(words));
  });
}

(async () => {
  const reply = await predict(application);
  console.log(`predict ${reply.label} ${reply.replica}`);
  console.log(`stream ${(await stream(application)).join(",")}`);
  try {
    await predict("no-such-application");
    console.log("missing OK");
  } catch (err) {
    console.log(`missing ${grpc.status[err.code]}`);
  }
  stub.close();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
