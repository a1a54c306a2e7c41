// Inference nodes (`loom serve --role inference`, src/service/nodes/): each live node's registration,
// rewritten by its heartbeat and removed when it stops cleanly. Keyed by the node's id; a handful of
// records, read whole by the API processes that route to them.
import { allRecords, type Kv } from './db.ts';

/** A model a node has on disk (or in its Hugging Face cache): what its runtime's listLocal() reports. */
export interface NodeModel {
  id: string;
  kind: 'encoder' | 'decoder';
  dir: string;
  architecture?: string;
  context_length?: number;
  size_bytes?: number;
}

export interface InferenceNodeRecord {
  /** LOOM_NODE_ID, default <hostname>:<port> (a restarted node takes its record back) */
  id: string;
  /** where API processes reach its internal endpoint (LOOM_NODE_URL, default http://<host>:<port>) */
  url: string;
  /** models it can load (on disk), and those loaded or loading now */
  models: NodeModel[];
  loaded: string[];
  warming: string[];
  /** calls it runs or queues now, and the most it takes (past it: 529) */
  queue_depth: number;
  max_queue: number;
  started_at: string;
  /** heartbeat counter and time (ms since the epoch, the node's clock) */
  beat: number;
  beat_at: number;
  /** the record is dead past this time (ms since the epoch): about three missed beats */
  expires_at: number;
}

export function makeInferenceNodesRepo(h: Kv) {
  return {
    get: (id: string): Promise<InferenceNodeRecord | undefined> => h.get('inference_nodes', id),
    /** every registration, live or expired */
    all: (): Promise<InferenceNodeRecord[]> => allRecords(h, 'inference_nodes'),
    /** inside a transaction */
    put(r: InferenceNodeRecord): void { h.put('inference_nodes', r.id, r); },
    /** inside a transaction */
    remove(id: string): void { h.remove('inference_nodes', id); },
  };
}
export type InferenceNodesRepo = ReturnType<typeof makeInferenceNodesRepo>;
