#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only, Release, the server target alone) from the source
# distribution of llama-cpp-python, which vendors llama.cpp together with its GGUF converters. The bench
# (loadtest/bench_engine.py) uses it as the CPU peer. Not part of CI or of the test install.
#
# Idempotent: each step is skipped when its output is already there; a rerun only lets ninja
# rebuild what changed. Everything lives under .cache/llamacpp/ (ignored by git).
# Prints, on its last two lines, the binary and the source tree, in the form the bench reads:
#   LLAMA_SERVER=...   LLAMA_CPP_DIR=...
#
# Knobs (environment): LLAMACPP_VERSION (the llama-cpp-python release; its vendored llama.cpp is what
# is built), LLAMACPP_JOBS (parallel compile jobs, default 2: the build machine is shared),
# LLAMACPP_NATIVE (ON: tune for this CPU, the fair setting for a peer measured on this machine),
# LLAMACPP_CACHE (where the source, build and converter dependency go; default .cache/llamacpp: a
# build interrupted on a busy machine resumes where it stopped when the script is run again).
# On a 2-core machine shared with other jobs the build takes well over an hour (about 200 compile
# steps, llama.cpp's multimodal library included: the server links it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${LLAMACPP_VERSION:-0.3.36}"
jobs="${LLAMACPP_JOBS:-2}"
native="${LLAMACPP_NATIVE:-ON}"
cache="${LLAMACPP_CACHE:-$root/.cache/llamacpp}"
sdist="$cache/llama_cpp_python-$version.tar.gz"
src="$cache/llama_cpp_python-$version/vendor/llama.cpp"
build="$cache/build-$version"
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

say() { echo "[build_llamacpp] $*" >&2; }
mkdir -p "$cache"

for tool in cmake ninja c++; do
  command -v "$tool" >/dev/null || { say "missing $tool (install cmake, ninja-build and g++)"; exit 1; }
done

if [ ! -f "$sdist" ]; then
  say "1/4 fetching the llama-cpp-python $version source distribution"
  "$python" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$cache"
else
  say "1/4 source distribution already here: $(basename "$sdist")"
fi

if [ ! -f "$src/CMakeLists.txt" ]; then
  say "2/4 unpacking"
  tar -xzf "$sdist" -C "$cache"
else
  say "2/4 already unpacked"
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  say "3/4 configuring (CPU only, Release, static, no web UI, no network at build or run time)"
  # The web UI is left out (its assets would come from npm or a download); the server still serves
  # the HTTP API. OpenSSL/curl are off: the bench loads local files only.
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE="$native" \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    >"$cache/configure.log" 2>&1 || { say "configure failed; see $cache/configure.log"; tail -20 "$cache/configure.log" >&2; exit 1; }
else
  say "3/4 already configured"
fi

# The GGUF converters import sentencepiece even for BPE vocabularies; it goes beside the tree, not
# into the project's environment (loadtest/llamacpp_peer.py puts it on the converters' path).
deps="$src/.converter-deps"
if [ ! -d "$deps/sentencepiece" ]; then
  say "converter dependency: sentencepiece into $deps"
  "$python" -m pip install --quiet --no-deps --target "$deps" "sentencepiece==${SENTENCEPIECE_VERSION:-0.2.3}"
fi

say "4/4 building llama-server with $jobs jobs (niced; progress below)"
nice -n 10 cmake --build "$build" --target llama-server -j "$jobs"

bin="$build/bin/llama-server"
[ -x "$bin" ] || { say "build finished but $bin is missing"; exit 1; }
say "done: $("$bin" --version 2>&1 | head -1)"
echo "LLAMA_SERVER=$bin"
echo "LLAMA_CPP_DIR=$src"
