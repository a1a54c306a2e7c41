// HTTP/1.x framing guard inside uWebSockets.js's own reads (see http_guard.cc).
//
// uWS 20.30 calls no handler for requests its parser does not take, so it cannot answer them; a
// proxy in front (server/guard.ts) can, at the price of a second socket hop per request. This guard
// sits in uWS's read path instead: the uWS binary's imports of recv and accept4 (its PLT slots) are
// pointed at http_guard_recv / http_guard_accept4, so every byte uWS reads from a connection
// accepted on a guarded port is checked in place, in the buffer uWS read it into, before uWS parses
// it. Plain request heads are scanned here (http_guard_plain_head_body_length, the byte scanner of
// server/guard.ts); every other head goes to a callback (server/guard.ts's examineHead), which
// refuses it with the same answer as the proxy, or rewrites it (HTTP/1.0, absolute-form targets).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::net {

/** what the callback decided about a request head that is not plain */
struct http_guard_decision {
  enum kind_t { WAIT, FORWARD, REFUSE } kind = WAIT;
  /** FORWARD: the head to pass on, with its final CRLF CRLF; REFUSE: the whole answer to send */
  std::string bytes;
  /** FORWARD: body bytes that follow the head; -1: a chunked body */
  int64_t body = 0;
  /** FORWARD: HTTP/1.0, nothing after this request is read */
  bool last = false;
};

/**
 * Decides about the head at buf[0, len): `end` is the offset of its CRLF CRLF, or -1 when none
 * arrived yet (WAIT, or REFUSE when what arrived is already wrong). `port`: the local port.
 */
using http_guard_examiner = http_guard_decision (*)(const uint8_t* buf, size_t len, long end, int port);

/**
 * Points the loaded uWS binary's recv and accept4 at the guard. `chunk_size_refusal`: the answer to
 * a malformed chunk-size line, `chunk_body_refusal` to one longer than max_head_bytes;
 * `error_refusal`: the answer when the examiner fails. False (and `error`
 * set) when no uWS binary is loaded or its imports cannot be found; nothing is changed then.
 */
struct http_guard_limits {
  /** header lines a plain head may have (MAX_HEADERS in server/guard.ts) */
  int max_headers;
  /** longest head, and longest chunk-size or trailer line (MAX_HEAD_BYTES) */
  size_t max_head_bytes;
};
bool http_guard_install(http_guard_examiner examine, http_guard_limits limits, const std::string& chunk_size_refusal,
                        const std::string& chunk_body_refusal, const std::string& error_refusal, std::string* error);
/** connections accepted on this local port from now on are guarded */
void http_guard_port_add(int port);
void http_guard_port_remove(int port);

/**
 * The guarded connection uWS read last on the guard's thread, as a number no other connection of
 * this process gets; 0 when that read was not a guarded connection's. uWS runs the request handlers
 * of the bytes a read returned before it reads again, so inside a handler this is the connection of
 * the request being handled (server/router.ts keys its client-address cache with it).
 */
uint64_t http_guard_connection();

/** counters, for tests and the bench: connections guarded, heads passed by the scanner, by the callback, refused */
struct http_guard_counts {
  uint64_t connections, plain_heads, examined_heads, refused;
};
http_guard_counts http_guard_counts_get();

/**
 * The common case in one pass over head[0, end) (end: offset of the CRLF CRLF): the body length
 * of a plain HTTP/1.1 head that passes on unchanged, or -1 (see plainHeadBodyLength in
 * server/guard.ts, which this mirrors byte for byte; a test checks them against each other).
 */
long http_guard_plain_head_body_length(const uint8_t* head, size_t end, int max_headers);

}  // namespace loom::net
