// mmapFile(path): maps a file read-only and returns it as an external ArrayBuffer (zero copy;
// unmapped when the buffer is garbage collected). Model weights are read this way.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include "napi_util.h"

namespace loom::napi {
namespace {

struct Mapping {
  void* addr;
  size_t size;
};

Napi::Value MmapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw_type(env, "path must be a string");
  std::string path = info[0].As<Napi::String>();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Napi::Error::New(env, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Napi::Error::New(env, "cannot stat " + path + ": " + std::strerror(e));
  }
  size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Napi::ArrayBuffer::New(env, 0);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (addr == MAP_FAILED) throw Napi::Error::New(env, "cannot mmap " + path + ": " + std::strerror(e));
  auto* m = new Mapping{addr, size};
  // Note: the pages are read-only; writing through the ArrayBuffer faults. JS wrappers expose
  // weights as read-only views.
  return Napi::ArrayBuffer::New(env, addr, size, [](Napi::Env, void*, Mapping* m) {
    ::munmap(m->addr, m->size);
    delete m;
  }, m);
}

void Init(Napi::Env env, Napi::Object exports) { exports.Set("mmapFile", Napi::Function::New(env, MmapFile)); }

}  // namespace
LOOM_NAPI_REGISTER(mmap, Init);
}  // namespace loom::napi
