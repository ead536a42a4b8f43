// The package's types. The messages' and the service's are generated from
// the protos (types/, by scripts/generate.js with @grpc/proto-loader's
// proto-loader-gen-types): a request type accepts what you may send, an
// `__Output` type is what a reply holds (camelCase fields, enums as their
// names, 64-bit integers as numbers, defaults filled in).
import type * as grpc from "@grpc/grpc-js";
import type { ControllerServiceDefinition } from "./types/servefleet/v1/ControllerService";
import type { ApplicationSpec } from "./types/servefleet/v1/ApplicationSpec";
import type { DeployApplicationsRequest } from "./types/servefleet/v1/DeployApplicationsRequest";
import type { DeployApplicationsResponse__Output } from "./types/servefleet/v1/DeployApplicationsResponse";
import type { DeleteApplicationsResponse__Output } from "./types/servefleet/v1/DeleteApplicationsResponse";
import type { DeploymentSpec } from "./types/servefleet/v1/DeploymentSpec";
import type { DeployResponse__Output } from "./types/servefleet/v1/DeployResponse";
import type { GetStatusResponse__Output } from "./types/servefleet/v1/GetStatusResponse";
import type { WatchResponse__Output } from "./types/servefleet/v1/WatchResponse";

export type { ControllerServiceDefinition };
export type * from "./types/servefleet/v1/ApplicationSpec";
export type * from "./types/servefleet/v1/ApplicationStatusInfo";
export type * from "./types/servefleet/v1/DeploymentSpec";
export type * from "./types/servefleet/v1/GetStatusResponse";
export type * from "./types/servefleet/v1/Route";
export type * from "./types/servefleet/v1/WatchResponse";

/** The streaming methods; every other method of ControllerService is unary. */
type StreamingMethod = "Watch" | "GetLogs" | "StreamLoad";
/** The methods' names (grpc.ServiceDefinition's index signature left out). */
type MethodName = keyof {
  [K in keyof ControllerServiceDefinition as string extends K ? never : number extends K ? never : K]: 0
};
export type UnaryMethod = Exclude<MethodName, StreamingMethod>;
export type RequestOf<M extends UnaryMethod> =
  ControllerServiceDefinition[M] extends { requestSerialize: (value: infer R) => Buffer } ? R : never;
export type ReplyOf<M extends UnaryMethod> =
  ControllerServiceDefinition[M] extends { responseDeserialize: (bytes: Buffer) => infer R } ? R : never;

export interface ClientOptions {
  /** A whole call, retries and failover included (default 30000). */
  timeoutMs?: number;
  /** One attempt on one controller (default 5000). */
  rpcTimeoutMs?: number;
  /** A bearer token (`servefleet token create`), sent with every call. */
  token?: string;
  /** tls(...) or tlsFromDir(...); plain text without. */
  credentials?: grpc.ChannelCredentials;
}

/** A Watch stream: a Readable of WatchResponse (`for await`), open on `address`. */
export interface WatchStream extends grpc.ClientReadableStream<WatchResponse__Output> {
  address: string;
  [Symbol.asyncIterator](): NodeJS.AsyncIterator<WatchResponse__Output>;
}

export declare class ControllerError extends Error {
  /** The gRPC status code (grpc.status). */
  readonly code: grpc.status;
  /** The server's message: INVALID_ARGUMENT's starts with the field's path. */
  readonly details: string;
}

export declare class ControllerClient {
  constructor(addresses?: string | string[], options?: ClientOptions);
  /** From SERVEFLEET_CONTROLLER, SERVEFLEET_CERTS or SERVEFLEET_CLUSTER_CA/_CERT/_KEY, SERVEFLEET_TOKEN. */
  static fromEnv(options?: ClientOptions, env?: NodeJS.ProcessEnv): ControllerClient;
  readonly addresses: string[];
  /** Any unary method of the service, on the leader, with retries and failover. */
  call<M extends UnaryMethod>(method: M, request?: RequestOf<M>): Promise<ReplyOf<M>>;
  deploy(spec: DeploymentSpec): Promise<DeployResponse__Output>;
  deployApplications(applications: ApplicationSpec[],
    extra?: Omit<DeployApplicationsRequest, "applications">): Promise<DeployApplicationsResponse__Output>;
  deleteApplications(names: string[]): Promise<DeleteApplicationsResponse__Output>;
  status(): Promise<GetStatusResponse__Output>;
  /** A Watch stream on the leader for the keys ("routes", "replicas/<app>/<deployment>", ...). */
  watch(keys: string[]): Promise<WatchStream>;
  close(): void;
}

/** Whether a failed call may go to the next controller (UNAVAILABLE, DEADLINE_EXCEEDED). */
export declare function retryable(err: { code?: number }): boolean;
/** Mutual TLS from PEM files; an Error names a file that is missing or holds no PEM block. */
export declare function tls(caFile: string, certFile: string, keyFile: string): grpc.ChannelCredentials;
/** tls() of a `servefleet certs init` directory: ca.crt, ROLE.crt, ROLE.key. */
export declare function tlsFromDir(dir: string, role: string): grpc.ChannelCredentials;
/** Why the token cannot be sent as a bearer token, or null when it can. */
export declare function tokenProblem(token: string): string | null;
export declare const LEADER_KEY: "servefleet-leader";
export declare const DEFAULT_ADDRESS: string;
export declare const status: typeof grpc.status;
