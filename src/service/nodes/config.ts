// Inference-node settings from the environment (docs/deploy.md "Inference nodes"), read by the node
// (node-main.ts) and by API processes that route to nodes (runtime-remote.ts).
import { hostname } from 'node:os';
import { MIN_SECRET_LENGTH } from './protocol.ts';

export interface NodeConfig {
  /** LOOM_NODE_SECRET: the shared secret of the internal endpoint (both sides) */
  secret: string;
  /** LOOM_NODE_ID: this node's name in the registry (default <hostname>:<port>) */
  id: string | null;
  /** LOOM_NODE_URL: the URL API processes reach this node at (default http://<LOOM_HOST>:<port>) */
  url: string | null;
  /** LOOM_NODE_HEARTBEAT_MS: how often a node rewrites its registration; it expires after 3 missed beats */
  heartbeatMs: number;
  /** LOOM_NODE_MAX_QUEUE: calls a node runs or queues at once; past it the node answers 529 */
  maxQueue: number;
}

const num = (v: string | undefined, d: number) => (v && Number.isFinite(Number(v)) && Number(v) > 0 ? Number(v) : d);

export function nodeConfigFromEnv(env: NodeJS.ProcessEnv = process.env): NodeConfig {
  return {
    secret: env.LOOM_NODE_SECRET ?? '',
    id: env.LOOM_NODE_ID || null,
    url: env.LOOM_NODE_URL || null,
    heartbeatMs: num(env.LOOM_NODE_HEARTBEAT_MS, 2000),
    maxQueue: num(env.LOOM_NODE_MAX_QUEUE, 256),
  };
}

/** Throws the reason a process that serves or routes to nodes cannot start with this secret. */
export function checkNodeSecret(secret: string, role: string): void {
  if (secret.length < MIN_SECRET_LENGTH) {
    throw new Error(`LOOM_NODE_SECRET must be set (at least ${MIN_SECRET_LENGTH} characters) for ${role}: `
      + 'the shared secret of the inference nodes\' internal endpoint (docs/deploy.md)');
  }
}

export const defaultNodeId = (port: number) => `${hostname()}:${port}`;
