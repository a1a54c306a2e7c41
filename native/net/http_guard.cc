// HTTP/1.x framing guard in uWebSockets.js's read path (see http_guard.h).
//
// How bytes flow. uSockets reads a connection with recv(fd, buf, len) into its 512 KiB receive
// buffer and hands what it got to uWS's HTTP parser. The guard's recv reads the kernel's bytes
// into the same buffer (leaving len / 16 free at the end for head rewrites), then walks them with
// the framing state of the connection, copying what passes to the front of the buffer in place:
//
//   HEAD        a request head: up to its CRLF CRLF, scanned (plain) or decided by the callback
//   LENGTH      Content-Length body bytes, passed through
//   CHUNK_SIZE  a chunk-size line, checked and passed on whole
//   CHUNK_DATA  chunk bytes and their CRLF, passed through
//   TRAILER     trailer lines up to the empty one
//   DONE        after an HTTP/1.0 request: the rest of the connection is read and dropped
//   REFUSED     the refusal was sent and the write side shut: read and dropped until the client closes
//
// An incomplete head (or chunk line) at the end of a read is kept in the connection's `held`
// bytes and returned with the read that completes it, so uWS only ever sees whole, checked heads.
// A read that leaves nothing for uWS returns -1 with EAGAIN, which uSockets takes as "nothing yet";
// the client's close returns 0 as before. Writes are uWS's own (send is not hooked).
//
// Threads: uWS runs its loop on the thread that created the app, and the callback calls into that
// thread's JS; the guard serves only connections accepted on the thread that installed it.
#include "http_guard.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace loom::net {
namespace {

uint8_t TCHAR[256];
void tchar_init() {
  const char* t = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  for (const char* c = t; *c; c++) TCHAR[uint8_t(*c)] = 1;
}

// buf[at, at + len) is `name` (lower-case letters and '-') in any case
bool name_is(const uint8_t* buf, size_t at, size_t len, const char* name) {
  size_t n = strlen(name);
  if (len != n) return false;
  for (size_t i = 0; i < n; i++) if ((buf[at + i] | 0x20) != uint8_t(name[i])) return false;
  return true;
}

}  // namespace
}  // namespace loom::net

#if defined(__linux__)
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

namespace loom::net {
namespace {

enum guard_state { HEAD, LENGTH, CHUNK_SIZE, CHUNK_DATA, TRAILER, DONE, REFUSED };

struct guard_conn {
  guard_state state = HEAD;
  /** LENGTH, CHUNK_DATA: bytes left */
  uint64_t left = 0;
  /** HTTP/1.0: DONE after this request */
  bool last = false;
  int port = 0;
  /** this connection's number among those the guard accepted (never reused, unlike the fd) */
  uint64_t serial = 0;
  /** bytes read but not yet passed on: an incomplete head or chunk line */
  std::vector<uint8_t> held;
};

struct guard_globals {
  http_guard_examiner examine = nullptr;
  http_guard_limits limits{47, 16 * 1024};
  std::string chunk_size_refusal, chunk_body_refusal, error_refusal;
  pthread_t thread{};
  bool installed = false;
  std::vector<int> ports;
  /** by file descriptor; null: not a guarded connection */
  std::vector<std::unique_ptr<guard_conn>> conns;
  http_guard_counts counts{0, 0, 0, 0};
  /** the serial the next guarded connection gets */
  uint64_t next_serial = 1;
  /** the serial of the connection of the last read on the guard's thread; 0: not a guarded one */
  uint64_t current = 0;
};
guard_globals g;

// offset of "\r\n\r\n" in buf[from, len), or -1
long find_crlf2(const uint8_t* buf, size_t from, size_t len) {
  while (from + 4 <= len) {
    const void* p = memchr(buf + from, '\r', len - from - 3);
    if (!p) return -1;
    size_t i = size_t(static_cast<const uint8_t*>(p) - buf);
    if (buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') return long(i);
    from = i + 1;
  }
  return -1;
}

// offset of "\r\n" in buf[from, len), or -1
long find_crlf(const uint8_t* buf, size_t from, size_t len) {
  while (from + 2 <= len) {
    const void* p = memchr(buf + from, '\r', len - from - 1);
    if (!p) return -1;
    size_t i = size_t(static_cast<const uint8_t*>(p) - buf);
    if (buf[i + 1] == '\n') return long(i);
    from = i + 1;
  }
  return -1;
}

// a chunk-size line without its CRLF: 1-8 hex digits, then nothing or ';' and no CR or LF
// (/^([0-9a-fA-F]{1,8})(;.*)?$/ of server/guard.ts); the size, or -1
long chunk_size_parse(const uint8_t* line, size_t len) {
  size_t i = 0;
  long n = 0;
  for (; i < len && i < 9; i++) {
    uint8_t c = line[i];
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
    if (d < 0) break;
    n = n * 16 + d;
  }
  if (i == 0 || i > 8) return -1;
  if (i == len) return n;
  if (line[i] != ';') return -1;
  for (; i < len; i++) if (line[i] == '\r' || line[i] == '\n') return -1;
  return n;
}

// the guard's state is the installing thread's (uWS's loop); other threads' sockets pass straight through
guard_conn* conn_get(int fd) {
  if (!pthread_equal(pthread_self(), g.thread)) return nullptr;
  if (fd < 0 || size_t(fd) >= g.conns.size()) return nullptr;
  return g.conns[size_t(fd)].get();
}

// sends the refusal and shuts the write side; what the client sends after is dropped
void conn_refuse(guard_conn* c, int fd, const std::string& answer) {
  c->state = REFUSED;
  c->held.clear();
  g.counts.refused++;
  size_t off = 0;
  while (off < answer.size()) {  // a few hundred bytes into an empty socket buffer: one call
    ssize_t k = send(fd, answer.data() + off, answer.size() - off, MSG_NOSIGNAL);
    if (k <= 0) break;
    off += size_t(k);
  }
  shutdown(fd, SHUT_WR);
}

// reads and drops what the client sends (DONE, REFUSED): 0 at its close, else -1
ssize_t conn_drain(int fd, void* buf, size_t len, int flags) {
  for (;;) {
    ssize_t n = recv(fd, buf, len, flags);
    if (n == 0) return 0;
    if (n < 0) return -1;  // EAGAIN: nothing more now (errno as recv left it)
  }
}

/**
 * Walks buf[0, total) (`cap`: room for growth) with c's framing, writing what passes to the front;
 * returns the bytes for uWS, or -1 after a refusal.
 */
long conn_pass(guard_conn* c, int fd, uint8_t* buf, size_t total, size_t cap) {
  size_t r = 0, w = 0;
  const size_t max_head = g.limits.max_head_bytes;
  while (r < total) {
    switch (c->state) {
      case HEAD: {
        long e = find_crlf2(buf, r, total);
        if (e >= 0 && size_t(e) - r <= max_head) {
          long body = http_guard_plain_head_body_length(buf + r, size_t(e) - r, g.limits.max_headers);
          if (body >= 0) {
            size_t n = size_t(e) + 4 - r;
            if (w != r) memmove(buf + w, buf + r, n);
            w += n;
            r += n;
            g.counts.plain_heads++;
            if (body > 0) { c->state = LENGTH; c->left = uint64_t(body); }
            continue;
          }
        }
        http_guard_decision d;
        if (g.examine) d = g.examine(buf + r, total - r, e >= 0 ? e - long(r) : -1, c->port);
        else d.kind = http_guard_decision::REFUSE, d.bytes = g.error_refusal;
        if (d.kind == http_guard_decision::REFUSE) { conn_refuse(c, fd, d.bytes); return -1; }
        if (d.kind == http_guard_decision::WAIT || e < 0) {
          if (e < 0 && d.kind == http_guard_decision::FORWARD) {  // the callback broke its contract
            conn_refuse(c, fd, g.error_refusal);
            return -1;
          }
          c->held.assign(buf + r, buf + total);
          r = total;
          break;
        }
        g.counts.examined_heads++;
        size_t consumed = size_t(e) + 4;  // end of the head in buf
        size_t n = d.bytes.size();
        if (w + n > consumed) {  // the rewrite is longer than the space the head leaves: shift the rest
          size_t grow = w + n - consumed;
          if (total + grow > cap) { conn_refuse(c, fd, g.error_refusal); return -1; }
          memmove(buf + consumed + grow, buf + consumed, total - consumed);
          total += grow;
          consumed += grow;
        }
        memcpy(buf + w, d.bytes.data(), n);
        w += n;
        r = consumed;
        c->last = d.last;
        if (d.body < 0) c->state = CHUNK_SIZE;
        else if (d.body > 0) { c->state = LENGTH; c->left = uint64_t(d.body); }
        else if (c->last) c->state = DONE;
        break;
      }
      case LENGTH:
      case CHUNK_DATA: {
        size_t n = size_t(std::min<uint64_t>(c->left, total - r));
        if (w != r) memmove(buf + w, buf + r, n);
        w += n;
        r += n;
        c->left -= n;
        if (c->left == 0) c->state = c->state == CHUNK_DATA ? CHUNK_SIZE : c->last ? DONE : HEAD;
        break;
      }
      case CHUNK_SIZE:
      case TRAILER: {
        long e = find_crlf(buf, r, total);
        if (e < 0) {
          if (total - r > max_head) { conn_refuse(c, fd, g.chunk_body_refusal); return -1; }
          c->held.assign(buf + r, buf + total);
          r = total;
          break;
        }
        size_t len = size_t(e) - r;
        if (c->state == CHUNK_SIZE) {
          long size = chunk_size_parse(buf + r, len);
          if (size < 0) { conn_refuse(c, fd, g.chunk_size_refusal); return -1; }
          if (size == 0) c->state = TRAILER;
          else { c->state = CHUNK_DATA; c->left = uint64_t(size) + 2; }
        } else if (len == 0) {
          c->state = c->last ? DONE : HEAD;
        }
        if (w != r) memmove(buf + w, buf + r, len + 2);
        w += len + 2;
        r += len + 2;
        break;
      }
      case DONE:
      case REFUSED:
        r = total;
        break;
    }
  }
  return long(w);
}

ssize_t guard_recv(int fd, void* out, size_t len, int flags) {
  guard_conn* c = conn_get(fd);
  if (!c) {
    if (pthread_equal(pthread_self(), g.thread)) g.current = 0;
    return recv(fd, out, len, flags);
  }
  g.current = c->serial;  // uWS calls the request handlers of what this read returns before it reads again
  if (c->state == DONE || c->state == REFUSED) return conn_drain(fd, out, len, flags);
  uint8_t* buf = static_cast<uint8_t*>(out);
  size_t held = c->held.size();
  size_t reserve = len / 16;
  if (held + reserve + 1 > len) {  // a receive buffer smaller than uSockets' 512 KiB: read straight through
    return recv(fd, out, len, flags);
  }
  ssize_t n = recv(fd, buf + held, len - held - reserve, flags);
  if (n <= 0) return n;  // the client's close (held bytes of an unfinished head go with it), or EAGAIN
  if (held) memcpy(buf, c->held.data(), held);
  c->held.clear();
  long w = conn_pass(c, fd, buf, held + size_t(n), len);
  if (w > 0) return w;
  if (w < 0 && c->state == REFUSED) {
    // whatever else the client sent is dropped; its close ends the connection
    if (conn_drain(fd, out, len, flags) == 0) return 0;
  }
  errno = EAGAIN;
  return -1;
}

int guard_accept4(int fd, struct sockaddr* addr, socklen_t* addrlen, int flags) {
  int s = accept4(fd, addr, addrlen, flags);
  if (s < 0 || !pthread_equal(pthread_self(), g.thread)) return s;
  if (size_t(s) < g.conns.size()) g.conns[size_t(s)].reset();
  if (g.ports.empty()) return s;
  sockaddr_storage local;
  socklen_t n = sizeof local;
  if (getsockname(s, reinterpret_cast<sockaddr*>(&local), &n) != 0) return s;
  int port = local.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port)
           : local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port) : -1;
  if (std::find(g.ports.begin(), g.ports.end(), port) == g.ports.end()) return s;
  if (size_t(s) >= g.conns.size()) g.conns.resize(size_t(s) + 1024);
  g.conns[size_t(s)] = std::make_unique<guard_conn>();
  g.conns[size_t(s)]->port = port;
  g.conns[size_t(s)]->serial = g.next_serial++;
  g.counts.connections++;
  return s;
}

#if defined(__x86_64__)
constexpr uint32_t JUMP_SLOT = R_X86_64_JUMP_SLOT;
#elif defined(__aarch64__)
constexpr uint32_t JUMP_SLOT = R_AARCH64_JUMP_SLOT;
#else
constexpr uint32_t JUMP_SLOT = 0xffffffff;
#endif

struct plt_patch {
  const char* lib = nullptr;
  void** recv_slot = nullptr;
  void** accept4_slot = nullptr;
};

// finds the uWS binary among the loaded objects and the GOT slots of its recv and accept4 imports
int plt_find(struct dl_phdr_info* info, size_t, void* data) {
  auto* p = static_cast<plt_patch*>(data);
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "uws_", 4) != 0 || !strstr(base, ".node")) return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (!dyn) return 0;
  ElfW(Addr) jmprel = 0, symtab = 0, strtab = 0;
  size_t pltrelsz = 0;
  bool rela = true;
  for (; dyn->d_tag != DT_NULL; dyn++) {
    switch (dyn->d_tag) {
      case DT_JMPREL: jmprel = dyn->d_un.d_ptr; break;
      case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
      case DT_SYMTAB: symtab = dyn->d_un.d_ptr; break;
      case DT_STRTAB: strtab = dyn->d_un.d_ptr; break;
      case DT_PLTREL: rela = dyn->d_un.d_val == DT_RELA; break;
    }
  }
  if (!jmprel || !symtab || !strtab || !rela) return 0;
  // glibc relocates these addresses in place when it loads the object; other loaders may not
  auto at = [&](ElfW(Addr) a) { return a < info->dlpi_addr ? a + info->dlpi_addr : a; };
  const auto* rel = reinterpret_cast<const ElfW(Rela)*>(at(jmprel));
  const auto* sym = reinterpret_cast<const ElfW(Sym)*>(at(symtab));
  const char* str = reinterpret_cast<const char*>(at(strtab));
  for (size_t i = 0; i < pltrelsz / sizeof(ElfW(Rela)); i++) {
    if (ELF64_R_TYPE(rel[i].r_info) != JUMP_SLOT) continue;
    const char* s = str + sym[ELF64_R_SYM(rel[i].r_info)].st_name;
    void** slot = reinterpret_cast<void**>(info->dlpi_addr + rel[i].r_offset);
    if (strcmp(s, "recv") == 0) p->recv_slot = slot;
    else if (strcmp(s, "accept4") == 0) p->accept4_slot = slot;
  }
  p->lib = info->dlpi_name;
  return 1;
}

bool slot_write(void** slot, void* fn) {
  long page = sysconf(_SC_PAGESIZE);
  auto start = reinterpret_cast<uintptr_t>(slot) & ~uintptr_t(page - 1);
  // the slot may be in a read-only (RELRO) page when the object was bound at load time
  if (mprotect(reinterpret_cast<void*>(start), size_t(page) * 2, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, fn, __ATOMIC_SEQ_CST);
  return true;
}

}  // namespace

bool http_guard_install(http_guard_examiner examine, http_guard_limits limits, const std::string& chunk_size_refusal,
                        const std::string& chunk_body_refusal, const std::string& error_refusal, std::string* error) {
  if (g.installed) {
    if (!pthread_equal(pthread_self(), g.thread)) {
      *error = "the guard is installed on another thread";
      return false;
    }
  } else {
    plt_patch p;
    dl_iterate_phdr(plt_find, &p);
    if (!p.lib) { *error = "no uWebSockets.js binary (uws_*.node) is loaded"; return false; }
    if (!p.recv_slot || !p.accept4_slot) {
      *error = std::string("no recv/accept4 imports in ") + p.lib;
      return false;
    }
    if (!slot_write(p.accept4_slot, reinterpret_cast<void*>(&guard_accept4))
        || !slot_write(p.recv_slot, reinterpret_cast<void*>(&guard_recv))) {
      *error = std::string("cannot write the import table of ") + p.lib;
      return false;
    }
    g.thread = pthread_self();
    g.installed = true;
  }
  tchar_init();
  g.examine = examine;
  g.limits = limits;
  g.chunk_size_refusal = chunk_size_refusal;
  g.chunk_body_refusal = chunk_body_refusal;
  g.error_refusal = error_refusal;
  return true;
}

void http_guard_port_add(int port) { g.ports.push_back(port); }

void http_guard_port_remove(int port) {
  auto it = std::find(g.ports.begin(), g.ports.end(), port);
  if (it != g.ports.end()) g.ports.erase(it);
}

uint64_t http_guard_connection() { return g.current; }

http_guard_counts http_guard_counts_get() { return g.counts; }

}  // namespace loom::net

#else  // no ELF import tables to point at the guard: server/guard.ts's proxy serves instead

namespace loom::net {
bool http_guard_install(http_guard_examiner, http_guard_limits, const std::string&, const std::string&,
                        const std::string&, std::string* error) {
  *error = "the in-process guard needs Linux";
  return false;
}
void http_guard_port_add(int) {}
void http_guard_port_remove(int) {}
uint64_t http_guard_connection() { return 0; }

http_guard_counts http_guard_counts_get() { return {0, 0, 0, 0}; }
}  // namespace loom::net

#endif

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loom::net {
namespace {

// the first i in [from, end) whose byte is not visible ASCII (0x21-0x7e, or 0x20-0x7e with `space`), or end;
// 16 bytes per step where SSE2 is there (every x86-64 CPU): a request head is mostly such runs (the target,
// header values such as an API key), which the byte loop took 2-3% of a small request's server CPU to scan
size_t visible_run_end(const uint8_t* buf, size_t from, size_t end, bool space) {
  size_t i = from;
#if defined(__SSE2__)
  // signed bytes: visible is lo < b < 0x7f; 0x80-0xff are negative and fail the first compare
  const __m128i lo = _mm_set1_epi8(char(space ? 0x1f : 0x20)), hi = _mm_set1_epi8(0x7f);
  for (; i + 16 <= end; i += 16) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + i));
    __m128i ok = _mm_and_si128(_mm_cmpgt_epi8(b, lo), _mm_cmplt_epi8(b, hi));
    unsigned bad = unsigned(_mm_movemask_epi8(ok)) ^ 0xffffu;
    if (bad) return i + size_t(__builtin_ctz(bad));
  }
#endif
  const uint8_t lo1 = space ? 0x20 : 0x21;
  for (; i < end; i++) if (buf[i] < lo1 || buf[i] > 0x7e) return i;
  return end;
}

}  // namespace

long http_guard_plain_head_body_length(const uint8_t* buf, size_t end, int max_headers) {
  if (!TCHAR['a']) tchar_init();
  static const char HTTP11[] = " HTTP/1.1\r\n";
  const size_t HTTP11_LEN = sizeof HTTP11 - 1;
  size_t i = 0;
  // method: [A-Z][A-Z-]*
  uint8_t b = buf[0];
  if (b < 'A' || b > 'Z') return -1;
  for (i = 1; i < end; i++) {
    b = buf[i];
    if (b == ' ') break;
    if ((b < 'A' || b > 'Z') && b != '-') return -1;
  }
  // target: '/' then visible ASCII
  if (buf[++i] != '/') return -1;
  i = visible_run_end(buf, i, end, false);
  if (i < end && buf[i] != ' ') return -1;
  if (i + HTTP11_LEN > end + 2 || memcmp(buf + i, HTTP11, HTTP11_LEN) != 0) return -1;
  i += HTTP11_LEN;
  int lines = 0, hosts = 0;
  long length = -1;
  // header lines; the last ends at `end` (its CRLF is the first half of the blank line's)
  while (i < end + 2) {
    if (++lines > max_headers) return -1;
    size_t start = i;
    while (i < end && TCHAR[buf[i]]) i++;
    size_t name_len = i - start;
    if (name_len == 0 || buf[i] != ':') return -1;
    i++;
    while (buf[i] == ' ' || buf[i] == '\t') i++;
    size_t value_start = i;
    for (;;) {  // visible ASCII, spaces and tabs up to the CR
      i = visible_run_end(buf, i, end, true);
      if (i >= end || buf[i] != '\t') break;
      i++;
    }
    if (i < end && buf[i] != '\r') return -1;
    if (buf[i] != '\r' || buf[i + 1] != '\n') return -1;
    uint8_t c = buf[start] | 0x20;
    if (c == 'h' && name_is(buf, start, name_len, "host")) hosts++;
    else if (c == 't' && name_is(buf, start, name_len, "transfer-encoding")) return -1;
    else if (c == 'x' && name_is(buf, start, name_len, "x-loom-peer")) return -1;
    else if (c == 'c' && name_is(buf, start, name_len, "content-length")) {
      if (length >= 0) return -1;
      size_t v = value_start;
      long n = 0;
      for (; v < i && buf[v] >= '0' && buf[v] <= '9' && v - value_start < 16; v++) n = n * 10 + (buf[v] - '0');
      size_t digits = v - value_start;
      while (v < i && (buf[v] == ' ' || buf[v] == '\t')) v++;
      if (digits == 0 || digits > 15 || v != i) return -1;
      length = n;
    }
    i += 2;
  }
  return hosts == 1 ? std::max(length, 0L) : -1;
}


}  // namespace loom::net
