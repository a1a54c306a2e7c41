-- 002: inference nodes' registrations (src/store/inference-nodes.ts), rewritten by each node's heartbeat.
CREATE TABLE inference_nodes (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
