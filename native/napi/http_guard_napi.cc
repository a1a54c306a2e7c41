// Bindings for the HTTP framing guard in uWS's read path (native/net/http_guard.h). The guard
// decides about heads that are not plain with a JS function (server/guard.ts's examineHead), called
// on uWS's loop thread, where the guard runs.
#include "napi_util.h"
#include "../net/http_guard.h"

namespace {
using loom::net::http_guard_decision;

Napi::FunctionReference examiner;
napi_env examiner_env = nullptr;
std::string error_refusal;

http_guard_decision examine_js(const uint8_t* buf, size_t len, long end, int port) {
  http_guard_decision d;
  d.kind = http_guard_decision::REFUSE;
  d.bytes = error_refusal;
  Napi::Env env(examiner_env);
  Napi::HandleScope scope(env);
  try {
    Napi::Value r = examiner.Call({Napi::Buffer<uint8_t>::Copy(env, buf, len), Napi::Number::New(env, double(end)),
                                   Napi::Number::New(env, port)});
    if (r.IsNull() || r.IsUndefined()) {
      d.kind = http_guard_decision::WAIT;
    } else if (r.IsBuffer()) {  // a refusal
      auto b = r.As<Napi::Buffer<char>>();
      d.bytes.assign(b.Data(), b.Length());
    } else if (r.IsObject()) {  // {head: Buffer, body: number (-1: chunked), last: boolean}
      Napi::Object o = r.As<Napi::Object>();
      auto head = o.Get("head").As<Napi::Buffer<char>>();
      d.kind = http_guard_decision::FORWARD;
      d.bytes.assign(head.Data(), head.Length());
      d.body = int64_t(o.Get("body").As<Napi::Number>().Int64Value());
      d.last = o.Get("last").ToBoolean().Value();
    }
  } catch (const Napi::Error&) {
    // the examiner threw (a bug there): the connection gets the generic refusal
  }
  return d;
}

std::string bytes_arg(const Napi::Value& v) {
  auto b = v.As<Napi::Buffer<char>>();
  return std::string(b.Data(), b.Length());
}

// httpGuardInstall(examine, maxHeaders, maxHeadBytes, chunkSizeRefusal, chunkBodyRefusal, errorRefusal):
// null, or why not
Napi::Value Install(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 6 || !info[0].IsFunction() || !info[3].IsBuffer() || !info[4].IsBuffer() || !info[5].IsBuffer()) {
    loom::napi::throw_type(env, "httpGuardInstall(examine, maxHeaders, maxHeadBytes, chunkSizeRefusal, "
                                "chunkBodyRefusal, errorRefusal)");
  }
  if (examiner_env && examiner_env != napi_env(env)) return Napi::String::New(env, "installed by another thread");
  loom::net::http_guard_limits limits{info[1].As<Napi::Number>().Int32Value(),
                                      size_t(info[2].As<Napi::Number>().Int64Value())};
  error_refusal = bytes_arg(info[5]);
  std::string error;
  if (!loom::net::http_guard_install(examine_js, limits, bytes_arg(info[3]), bytes_arg(info[4]), error_refusal,
                                    &error)) {
    return Napi::String::New(env, error);
  }
  examiner = Napi::Persistent(info[0].As<Napi::Function>());
  examiner.SuppressDestruct();
  examiner_env = env;
  return env.Null();
}

Napi::Value PortAdd(const Napi::CallbackInfo& info) {
  loom::net::http_guard_port_add(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Value PortRemove(const Napi::CallbackInfo& info) {
  loom::net::http_guard_port_remove(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Value Counts(const Napi::CallbackInfo& info) {
  auto c = loom::net::http_guard_counts_get();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("connections", double(c.connections));
  o.Set("plainHeads", double(c.plain_heads));
  o.Set("examinedHeads", double(c.examined_heads));
  o.Set("refused", double(c.refused));
  return o;
}

// httpGuardConnection(): the guarded connection of the request being handled (0: none); called per request
Napi::Value Connection(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), double(loom::net::http_guard_connection()));
}

// httpGuardPlainHeadBodyLength(head: Buffer, end, maxHeaders): the native scanner, for tests
Napi::Value PlainHeadBodyLength(const Napi::CallbackInfo& info) {
  auto b = info[0].As<Napi::Buffer<uint8_t>>();
  int64_t end = info[1].As<Napi::Number>().Int64Value();
  if (end < 0 || size_t(end) + 4 > b.Length()) {
    loom::napi::throw_range(info.Env(), "end must leave the CRLF CRLF in the buffer");
  }
  int max_headers = info[2].As<Napi::Number>().Int32Value();
  long n = loom::net::http_guard_plain_head_body_length(b.Data(), size_t(end), max_headers);
  return Napi::Number::New(info.Env(), double(n));
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("httpGuardInstall", Napi::Function::New(env, Install));
  exports.Set("httpGuardPortAdd", Napi::Function::New(env, PortAdd));
  exports.Set("httpGuardPortRemove", Napi::Function::New(env, PortRemove));
  exports.Set("httpGuardCounts", Napi::Function::New(env, Counts));
  exports.Set("httpGuardConnection", Napi::Function::New(env, Connection));
  exports.Set("httpGuardPlainHeadBodyLength", Napi::Function::New(env, PlainHeadBodyLength));
}
}  // namespace

LOOM_NAPI_REGISTER(http_guard, Init);
