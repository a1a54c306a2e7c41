// Module entry point: calls every binding file's registered init function.
#include "napi_util.h"

namespace loom::napi {
std::vector<std::pair<const char*, InitFn>>& registry() {
  static std::vector<std::pair<const char*, InitFn>> r;
  return r;
}
}  // namespace loom::napi

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  for (auto& [name, fn] : loom::napi::registry()) fn(env, exports);
  return exports;
}

NODE_API_MODULE(loom, Init)
