{
  "variables": {
    "loom_common_cflags": ["-O3", "-std=c++17", "-fPIC", "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Wno-unknown-pragmas", "-Wno-maybe-uninitialized"]
  },
  "target_defaults": {
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/include"],
    "defines": ["NAPI_VERSION=9", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_CPP_EXCEPTIONS_ALL"],
    "cflags!": ["-fno-exceptions", "-O2", "-O0"],
    "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++1y", "-O2", "-O0"],
    "cflags_cc": ["<@(loom_common_cflags)", "-fexceptions"],
    "ldflags": ["-pthread"]
  },
  "targets": [
    {
      "target_name": "loom_avx512",
      "type": "static_library",
      "sources": ["<!@(node scripts/native-sources.cjs avx512)"],
      "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mavx512vnni", "-mavx2", "-mfma", "-mf16c"]
    },
    {
      "target_name": "loom_avx2",
      "type": "static_library",
      "sources": ["<!@(node scripts/native-sources.cjs avx2)"],
      "cflags_cc": ["-mavx2", "-mfma", "-mf16c"]
    },
    {
      "target_name": "loom",
      "sources": ["<!@(node scripts/native-sources.cjs portable)"],
      "dependencies": ["loom_avx512", "loom_avx2"],
      "libraries": ["-ldl"]
    }
  ]
}
