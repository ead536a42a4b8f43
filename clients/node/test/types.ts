// Type-checked by `npm test` (tsc -p test), never run: the package's types,
// generated from the protos, take what the API takes and refuse what it
// does not (each @ts-expect-error must meet an error, or tsc fails).
import { ControllerClient, ControllerError, tlsFromDir, type WatchStream } from "..";

async function typed(client: ControllerClient): Promise<void> {
  await client.deployApplications([{
    name: "app", importPath: "graph_app:hello", routePrefix: "/app",
    runtime: { workingDir: "/srv/apps" },
    deployments: [{ name: "D", replicaConfig: { numReplicas: 2 } }],
  }]);
  const status = await client.status();
  const leader: string = status.leader;
  const running: boolean = status.applications.some(
    (a) => a.name === "app" && a.status === "APPLICATION_STATUS_RUNNING");
  const replicas = await client.call("ListReplicas", { application: "app" });
  const ids: string[] = replicas.replicas.map((r) => r.record?.replicaId ?? "");
  const stream: WatchStream = await client.watch(["routes"]);
  for await (const response of stream) {
    const prefixes = response.snapshot?.routes?.routes.map((r) => r.routePrefix);
    void prefixes;
  }
  void [leader, running, ids];

  // @ts-expect-error: a field the message does not have
  await client.deploy({ name: "m", importPth: "m:a" });
  // @ts-expect-error: numReplicas is a number
  await client.deployApplications([{ name: "a", deployments: [{ replicaConfig: { numReplicas: "2" } }] }]);
  // @ts-expect-error: no such method
  await client.call("Deploys", {});
  // @ts-expect-error: Watch is a stream, not a unary call
  await client.call("Watch", {});
  // @ts-expect-error: an enum takes its names
  status.applications[0].status === "RUNNING_NOW";
}

new ControllerClient("127.0.0.1:7373", { credentials: tlsFromDir("certs", "client"), token: "t" });
const err = new Error() as ControllerError;
const code: number = err.code;
void [typed, code];
